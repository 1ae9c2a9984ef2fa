"""Data the package generates itself, so that nothing is downloaded."""

from keras_transformer.data.toy import reverse_task

__all__ = ["reverse_task"]
