// The chat page: each question goes to /v1/chat/completions, the answer is
// appended to the conversation. Everything here is served by the package.
const messages = document.getElementById("messages");
const form = document.getElementById("ask");
const question = document.getElementById("question");
const send = document.getElementById("send");
const method = document.getElementById("method");
const temperature = document.getElementById("temperature");
const temperatureValue = document.getElementById("temperature-value");
const status = document.getElementById("status");

function add(role, text) {
  const item = document.createElement("li");
  item.className = role;
  item.textContent = text;
  messages.appendChild(item);
  item.scrollIntoView({ block: "end" });
  return item;
}

async function checkHealth() {
  try {
    const response = await fetch("/health");
    const body = await response.json();
    if (response.ok) {
      status.textContent = `모델: ${body.model}`;
      return;
    }
    status.textContent = body.error ? body.error.message : "모델을 불러오는 중…";
  } catch (error) {
    status.textContent = "서버에 연결할 수 없습니다.";
  }
  setTimeout(checkHealth, 1000);
}

method.addEventListener("change", () => {
  temperature.disabled = method.value !== "sample";
});
temperature.addEventListener("input", () => {
  temperatureValue.textContent = temperature.value;
});

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = question.value.trim();
  if (!text) return;
  add("user", text);
  question.value = "";
  send.disabled = true;
  const body = { messages: [{ role: "user", content: text }] };
  if (method.value === "sample") {
    body.temperature = Number(temperature.value);
  } else if (method.value) {
    body.method = method.value;
  }
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (response.ok) {
      add("assistant", answer.choices[0].message.content);
    } else {
      add("error", `오류 (${response.status}): ${answer.error.message}`);
    }
  } catch (error) {
    add("error", `서버에 연결할 수 없습니다: ${error}`);
  } finally {
    send.disabled = false;
    question.focus();
  }
});

checkHealth();
