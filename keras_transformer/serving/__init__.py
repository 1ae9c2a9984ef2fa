"""Putting a trained model to work on TensorFlow: `Translator` (texts in, answers out),
the SavedModel and CTranslate2 exports, and the HTTP server of `keras-transformer serve`."""

# How a CTranslate2 export stores its weights (`export --quantization`).
QUANTIZATIONS = ("float32", "int8", "int8_float32")
