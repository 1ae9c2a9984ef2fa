"""Execute the notebooks and store them with their outputs.

    python tools/store_notebooks.py              # all eight
    python tools/store_notebooks.py 01 05        # the ones whose names start so
    python tools/store_notebooks.py 05 --chatbot-csv PATH   # 05 on a ChatbotData CSV

Each notebook runs top to bottom in a fresh kernel from `notebooks/`, in the
mode `MODES` names (full unless a full run takes over 10 minutes on 2 cores),
with its figures as PNG at `DPI`. The package version, the date and the mode
are written into the notebook's metadata (`keras_transformer`) and into the
line of its first cell that starts with `RUN_LINE` (the mode only where the
notebook has a fast mode). A run that raises, or an
output that names a path of this machine, stops the script and stores nothing
for that notebook. The test command executes its own copies in fast mode and
never writes here.
"""

import argparse
import contextlib
import datetime
import os
import re
import tempfile
import time

import nbformat
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")

# "fast": KT_NOTEBOOK_FAST=1, because the full run takes over 10 minutes on 2 cores.
MODES = {}
DPI = 100
RUN_LINE = "> 아래 출력을 만든 실행:"
MODE_WORDS = {
    "full": "전체 모드",
    "fast": "빠른 모드(`KT_NOTEBOOK_FAST=1`, 전체 모드는 2코어 CPU에서 10분이 넘습니다)",
}
# TensorFlow's C++ start-up lines (oneDNN, no CUDA driver) reach stderr whatever
# TF_CPP_MIN_LOG_LEVEL says; they tell a reader nothing and are not stored.
LOG_LINE = re.compile(r"^([IWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\]|WARNING: All log messages before "
                      r"absl::InitializeLog\(\)|To enable the following instructions:)")
# Outputs must not show where this machine keeps things.
MACHINE_PATH = re.compile(r"(/tmp/|/home/|/work/|/root/|/usr/|site-packages|\.venv)")


def run_line(version, date, mode, minutes, has_fast_mode):
    """The record line; a notebook without a fast mode names no mode."""
    mode_words = f"{MODE_WORDS[mode]}, " if has_fast_mode else ""
    return (f"{RUN_LINE} keras_transformer {version}, {date}, {mode_words}"
            f"CPU 2코어에서 {minutes:.1f}분")


def set_run_line(cell, line):
    lines = cell.source.split("\n")
    kept = [text for text in lines if not text.startswith(RUN_LINE)]
    if kept and kept[-1] != "":
        kept.append("")
    cell.source = "\n".join(kept + [line])


def drop_log_lines(notebook):
    """Remove TensorFlow's start-up lines from stderr, and outputs left empty; join
    the pieces of one stream that such a line had split (a printed line stays whole)."""
    for cell in notebook.cells:
        kept = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                lines = output["text"].splitlines(keepends=True)
                output["text"] = "".join(line for line in lines if not LOG_LINE.match(line))
                if not output["text"].strip():
                    continue
            previous = kept[-1] if kept else {}
            if (output.get("output_type") == previous.get("output_type") == "stream"
                    and output.get("name") == previous.get("name")):
                previous["text"] += output["text"]
                continue
            kept.append(output)
        if cell.cell_type == "code":
            cell.outputs = kept


def machine_paths(notebook):
    found = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            texts = [output.get("text", "")]
            texts += [value for key, value in output.get("data", {}).items()
                      if key.startswith("text/")]
            texts += output.get("traceback", [])
            for text in texts:
                text = "".join(text) if isinstance(text, list) else text
                for match in MACHINE_PATH.finditer(text):
                    start = max(match.start() - 40, 0)
                    found.append(f"cell {index}: ...{text[start:match.end() + 40]}...")
    return found


@contextlib.contextmanager
def kernel_environment(mode, config):
    """The kernel's environment: the notebook's mode, figures at `DPI`, quiet logs."""
    rc = os.path.join(config, "matplotlibrc")
    with open(rc, "w", encoding="utf-8") as file:
        file.write(f"figure.dpi: {DPI}\nsavefig.dpi: {DPI}\n")
    saved = dict(os.environ)
    os.environ.update(MATPLOTLIBRC=rc, TF_CPP_MIN_LOG_LEVEL="2")
    if mode == "fast":
        os.environ["KT_NOTEBOOK_FAST"] = "1"
    else:
        os.environ.pop("KT_NOTEBOOK_FAST", None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def store(path, version, date):
    name = os.path.basename(path)
    mode = MODES.get(name[:2], "full")
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as config, kernel_environment(mode, config):
        started = time.perf_counter()
        NotebookClient(notebook, timeout=1800, kernel_name="python3",
                       resources={"metadata": {"path": NOTEBOOKS}}).execute()
        minutes = (time.perf_counter() - started) / 60
    drop_log_lines(notebook)
    found = machine_paths(notebook)
    if found:
        raise SystemExit(f"{name}: outputs name paths of this machine:\n  " + "\n  ".join(found))
    notebook.metadata["keras_transformer"] = {"version": version, "date": date, "mode": mode,
                                              "minutes": round(minutes, 1)}
    has_fast_mode = any("KT_NOTEBOOK_FAST" in cell.source for cell in notebook.cells
                        if cell.cell_type == "code")
    set_run_line(notebook.cells[0], run_line(version, date, mode, minutes, has_fast_mode))
    nbformat.write(notebook, path)
    size = os.path.getsize(path) / 1024
    print(f"{name}: {mode} mode, {minutes:.1f} min, {size:.0f} KiB stored", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefixes", nargs="*", help="notebooks whose names start so")
    parser.add_argument("--chatbot-csv", help="ChatbotData CSV for 05 and 07 (KT_CHATBOT_CSV); "
                        "without it they try the download and fall back to the shipped sample")
    args = parser.parse_args()
    import keras_transformer

    if args.chatbot_csv:
        os.environ["KT_CHATBOT_CSV"] = os.path.abspath(args.chatbot_csv)
    date = datetime.date.today().isoformat()
    names = sorted(name for name in os.listdir(NOTEBOOKS) if name.endswith(".ipynb"))
    if args.prefixes:
        names = [name for name in names if name.startswith(tuple(args.prefixes))]
    for name in names:
        store(os.path.join(NOTEBOOKS, name), keras_transformer.__version__, date)


if __name__ == "__main__":
    main()
