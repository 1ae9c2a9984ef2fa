"""Loaders for the files users bring: a chatbot CSV and a parallel TSV.

Both return a list of `(source, target)` string pairs. Malformed input raises
`ValueError` whose message starts with `path:line:`.
"""

import csv
import io
import os

from keras_transformer._files import write_text
from keras_transformer.errors import InputError

FORMATS = ("chatbot", "tsv")


class DataFileError(InputError):
    """A data file cannot be read; the message names the file and the line."""

    def __init__(self, path, line, message):
        location = f"{path}:{line}" if line else str(path)
        super().__init__(f"{location}: {message}")
        self.path, self.line = path, line


def _read_text(path):
    """The file's text (UTF-8, an optional BOM removed)."""
    if not os.path.isfile(path):
        raise DataFileError(path, None, "no such file")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DataFileError(path, line, f"not valid UTF-8 ({error.reason})") from None


def load_chatbot_csv(path, question_column="Q", answer_column="A"):
    """Read a chatbot CSV like the tutorial's `ChatBotData.csv` (columns `Q,A,label`).

    The first row names the columns; `Q` and `A` must be among them, other
    columns are ignored. Quoted fields may hold commas, quotes (`""`) and
    newlines. Blank lines are skipped, a UTF-8 BOM is allowed.

    Args:
        path: str. The CSV file.
        question_column: str. Column of the questions. Defaults to `"Q"`.
        answer_column: str. Column of the answers. Defaults to `"A"`.

    Returns:
        list of `(question, answer)` pairs.

    Raises:
        ValueError: (a `DataFileError`) naming the file and line, for a missing
            file, bad UTF-8, a missing column, an unterminated quote or a row
            with too few fields.
    """
    text = _read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise DataFileError(path, None, "the file is empty")
        header = [name.strip() for name in header]
        missing = [name for name in (question_column, answer_column) if name not in header]
        if missing:
            raise DataFileError(
                path, 1, f"the header {header} lacks the column(s) {missing}"
            )
        columns = header.index(question_column), header.index(answer_column)
        pairs = []
        for row in reader:
            if not row or all(not field.strip() for field in row):
                continue
            if len(row) <= max(columns):
                raise DataFileError(
                    path, reader.line_num,
                    f"expected at least {max(columns) + 1} fields, found {len(row)}",
                )
            pairs.append((row[columns[0]], row[columns[1]]))
    except csv.Error as error:
        raise DataFileError(path, reader.line_num, f"malformed CSV ({error})") from None
    return pairs


def load_parallel_tsv(path):
    """Read a tab-separated parallel corpus: `source<TAB>target` per line.

    Blank lines are skipped; columns after the second are ignored (the
    attribution column of many public corpora). A UTF-8 BOM is allowed.

    Args:
        path: str. The TSV file.

    Returns:
        list of `(source, target)` pairs.

    Raises:
        ValueError: (a `DataFileError`) naming the file and line, for a missing
            file, bad UTF-8 or a line without a tab.
    """
    pairs = []
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise DataFileError(path, number, "expected 'source<TAB>target', found no tab")
        pairs.append((fields[0], fields[1]))
    return pairs


def load_pairs(path, format):
    """Load `path` in `format` (`"chatbot"` or `"tsv"`); an empty result is an error."""
    if format not in FORMATS:
        raise InputError(
            "Received an invalid value for argument `format`, expected one of "
            f"{list(FORMATS)}. Received: format={format!r}"
        )
    pairs = load_chatbot_csv(path) if format == "chatbot" else load_parallel_tsv(path)
    if not pairs:
        raise DataFileError(path, None, "holds no sentence pairs")
    return pairs


def load_texts(path, format):
    """Texts to pretrain on: one per non-blank line (`"text"`), or a chatbot
    CSV's questions and answers (`"chatbot"`); an empty result is an error."""
    if format == "text":
        texts = [line.strip() for line in _read_text(path).split("\n") if line.strip()]
    elif format == "chatbot":
        texts = [text for pair in load_chatbot_csv(path) for text in pair]
    else:
        raise InputError(
            "Received an invalid value for argument `format`, expected one of "
            f"['text', 'chatbot']. Received: format={format!r}"
        )
    if not texts:
        raise DataFileError(path, None, "holds no text")
    return texts


def load_labeled(path, format):
    """`(text, label)` pairs: `text<TAB>label` lines (`"tsv"`) or a chatbot
    CSV's `Q` and `label` columns (`"chatbot"`); labels are stripped of spaces
    and an empty label is an error naming the line."""
    pairs = load_chatbot_csv(path, "Q", "label") if format == "chatbot" else load_pairs(
        path, format)
    if not pairs:
        raise DataFileError(path, None, "holds no labelled texts")
    for number, (_, label) in enumerate(pairs, start=1):
        if not label.strip():
            raise DataFileError(path, None, f"example {number} has an empty label")
    return [(text, label.strip()) for text, label in pairs]


def save_parallel_tsv(pairs, path):
    """Write `(source, target)` pairs as a TSV that `load_parallel_tsv` reads back.

    Tabs and line breaks inside a sentence are written as spaces.
    """
    write_text(path, "".join(f"{_one_line(source)}\t{_one_line(target)}\n"
                             for source, target in pairs))


def _one_line(text):
    return " ".join(text.replace("\t", " ").splitlines())
