"""Matplotlib figures: training curves and attention heatmaps.

Figures are built with `matplotlib.figure.Figure`, not pyplot, so they work
without a display and show inline in Jupyter. Each takes `language="ko"` for Korean
titles, axes and legends (the notebooks' language). Korean labels are drawn with
NanumGothic (shipped by the `koreanize-matplotlib` package, used only as a
font carrier), with DejaVu Sans as the fallback for other scripts.
"""

import importlib.util
import os

import numpy as np
from matplotlib import font_manager, rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from keras_transformer import _config

_KOREAN_FONT = "NanumGothic"

# The words drawn on the figures: (English, Korean) for `language="en"` and `"ko"`.
_LANGUAGES = ("en", "ko")
_TEXTS = {
    "masked_loss": ("Loss (masked, label-smoothed)", "손실 (패딩 제외, 레이블 스무딩)"),
    "loss": ("Loss", "손실"),
    "loss_axis": ("loss", "손실"),
    "masked_accuracy": ("Token accuracy (masked)", "토큰 정확도 (패딩 제외)"),
    "accuracy": ("Accuracy", "정확도"),
    "accuracy_axis": ("accuracy", "정확도"),
    "answers": ("Validation answers (greedy)", "검증 답 (그리디)"),
    "answers_axis": ("chrF / % distinct", "chrF / 서로 다른 답 %"),
    "distinct": ("% distinct", "서로 다른 답 %"),
    "train": ("train", "학습"),
    "validation": ("validation", "검증"),
    "epoch": ("epoch", "에포크"),
    "key": ("key token (source in cross-attention)", "키 토큰 (크로스 어텐션이면 원문)"),
    "query": ("query token", "쿼리 토큰"),
    "head": ("head {}", "헤드 {}"),
    "all_heads": ("all heads", "헤드 전체"),
    "weight": ("attention weight", "어텐션 가중치"),
    "attention": ("Attention", "어텐션"),
    "predicted": ("predicted label", "예측한 레이블"),
    "true": ("true label", "정답 레이블"),
    "confusion": ("Confusion matrix", "혼동 행렬"),
    "examples": ("examples", "개수"),
}


def _texts(language):
    column = _LANGUAGES.index(_config.check_choice("language", language, _LANGUAGES))
    return {key: words[column] for key, words in _TEXTS.items()}


def _font_family():
    """Font list for our figures, registering NanumGothic once if it is installed."""
    if _KOREAN_FONT not in {font.name for font in font_manager.fontManager.ttflist}:
        spec = importlib.util.find_spec("koreanize_matplotlib")
        if spec is None or not spec.submodule_search_locations:
            return ["DejaVu Sans"]
        path = os.path.join(spec.submodule_search_locations[0], "fonts", "NanumGothic.ttf")
        if not os.path.isfile(path):
            return ["DejaVu Sans"]
        font_manager.fontManager.addfont(path)
    return [_KOREAN_FONT, "DejaVu Sans"]


def _style():
    return rc_context({"font.family": _font_family(), "axes.unicode_minus": False})


def _save(figure, path):
    if path is not None:
        figure.savefig(path, dpi=120, bbox_inches="tight")
    return figure


def plot_history(history, path=None, language="en"):
    """Loss and accuracy per epoch, training and validation, and the chrF and
    share of distinct answers of the validation translations when logged.

    Args:
        history: dict of lists, like `keras.callbacks.History.history`, with
            `loss` and optionally `val_loss`, `masked_accuracy` and
            `val_masked_accuracy` (or a classifier's `accuracy` and
            `val_accuracy`), `val_chrf`, `val_distinct_answers`.
        path: str. Save the figure there as PNG. Defaults to `None`.
        language: str. `"en"` or `"ko"` (Korean titles, axes and legends).
            Defaults to `"en"`.

    Returns:
        `matplotlib.figure.Figure`.
    """
    text = _texts(language)
    accuracy = "masked_accuracy" if "masked_accuracy" in history else "accuracy"
    train, validation = text["train"], text["validation"]
    panels = [(text["masked_loss" if accuracy == "masked_accuracy" else "loss"],
               text["loss_axis"], (("loss", train), ("val_loss", validation))),
              (text[accuracy], text["accuracy_axis"],
               ((accuracy, train), (f"val_{accuracy}", validation)))]
    if history.get("val_chrf"):
        panels.append((text["answers"], text["answers_axis"],
                       (("val_chrf", "chrF"), ("val_distinct_answers", text["distinct"]))))
    with _style():
        figure = Figure(figsize=(5 * len(panels), 4), layout="constrained")
        for axis, (title, ylabel, curves) in zip(figure.subplots(1, len(panels)), panels):
            for key, label in curves:
                values = history.get(key)
                if values:
                    scale = 100 if key == "val_distinct_answers" else 1
                    epochs = np.arange(1, len(values) + 1)
                    axis.plot(epochs, np.asarray(values) * scale, marker="o", markersize=3,
                              label=label)
            axis.set_title(title)
            axis.set_xlabel(text["epoch"])
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
            axis.set_ylabel(ylabel)
            axis.grid(alpha=0.3)
            if axis.has_data():
                axis.legend()
    return _save(figure, path)


def plot_attention(attention, source_tokens, target_tokens, path=None, title=None,
                   language="en", x_label=None, y_label=None):
    """Heatmaps of attention weights, one per head.

    Args:
        attention: array `(heads, T, S)` or `(T, S)`: rows are target
            (query) positions, columns source (key) positions.
        source_tokens: list of str, length `S`: column labels.
        target_tokens: list of str, length `T`: row labels.
        path: str. Save the figure there as PNG. Defaults to `None`.
        title: str. Figure title. Defaults to `"Attention"` (`"어텐션"` with
            `language="ko"`).
        language: str. `"en"` or `"ko"` (Korean axes and head titles).
            Defaults to `"en"`.
        x_label: str. Name of the column (key) axis, e.g. what the columns
            are in a self-attention figure. Defaults to `None`: "key token
            (source in cross-attention)" in the chosen language.
        y_label: str. Name of the row (query) axis. Defaults to `None`:
            "query token" in the chosen language.

    Returns:
        `matplotlib.figure.Figure`.
    """
    text = _texts(language)
    x_label = text["key"] if x_label is None else x_label
    y_label = text["query"] if y_label is None else y_label
    attention = np.asarray(attention, dtype=np.float32)
    if attention.ndim == 2:
        attention = attention[np.newaxis]
    if attention.ndim != 3 or attention.shape[1:] != (len(target_tokens), len(source_tokens)):
        raise ValueError(
            "Received an invalid value for argument `attention`, expected shape "
            f"(heads, {len(target_tokens)}, {len(source_tokens)}) matching the token "
            f"lists. Received: attention.shape={attention.shape}"
        )
    heads = attention.shape[0]
    columns = min(heads, 2 if heads <= 4 else 4)
    rows = -(-heads // columns)
    size = (max(3.0, 0.45 * len(source_tokens) + 1.5), max(2.5, 0.4 * len(target_tokens) + 1.2))
    with _style():
        figure = Figure(figsize=(size[0] * columns, size[1] * rows), layout="constrained")
        axes = np.atleast_1d(figure.subplots(rows, columns, squeeze=False)).ravel()
        for head, axis in enumerate(axes):
            if head >= heads:
                axis.set_visible(False)
                continue
            image = axis.imshow(attention[head], cmap="viridis", vmin=0.0, vmax=1.0,
                                aspect="auto")
            axis.set_xticks(range(len(source_tokens)), source_tokens, rotation=90)
            axis.set_yticks(range(len(target_tokens)), target_tokens)
            if head >= heads - columns:  # the axis names once per row and column
                axis.set_xlabel(x_label)
            if head % columns == 0:
                axis.set_ylabel(y_label)
            axis.set_title(text["head"].format(head + 1) if heads > 1 else text["all_heads"])
        figure.colorbar(image, ax=list(axes[:heads]), shrink=0.8, label=text["weight"])
        figure.suptitle(title or text["attention"])
    return _save(figure, path)


def plot_confusion_matrix(matrix, labels, path=None, title=None, language="en"):
    """A confusion matrix: counts, rows the true labels, columns the predicted.

    Args:
        matrix: array `(n, n)` of counts.
        labels: list of n str.
        path: str. Save the figure there as PNG. Defaults to `None`.
        title: str. Defaults to `"Confusion matrix"` (`"혼동 행렬"` with
            `language="ko"`).
        language: str. `"en"` or `"ko"` (Korean axes). Defaults to `"en"`.

    Returns:
        `matplotlib.figure.Figure`.
    """
    text = _texts(language)
    matrix = np.asarray(matrix)
    if matrix.shape != (len(labels), len(labels)):
        raise ValueError(
            "Received an invalid value for argument `matrix`, expected shape "
            f"({len(labels)}, {len(labels)}) matching the labels. Received: "
            f"matrix.shape={matrix.shape}"
        )
    size = max(3.5, 0.6 * len(labels) + 2)
    with _style():
        figure = Figure(figsize=(size + 1, size), layout="constrained")
        axis = figure.subplots()
        image = axis.imshow(matrix, cmap="Blues")
        for (row, column), count in np.ndenumerate(matrix):
            color = "white" if count > matrix.max() / 2 else "black"
            axis.text(column, row, str(count), ha="center", va="center", color=color)
        axis.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
        axis.set_yticks(range(len(labels)), labels)
        axis.set_xlabel(text["predicted"])
        axis.set_ylabel(text["true"])
        axis.set_title(title or text["confusion"])
        figure.colorbar(image, ax=axis, shrink=0.8, label=text["examples"])
    return _save(figure, path)
