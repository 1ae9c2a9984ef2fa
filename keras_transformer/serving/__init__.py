"""Putting a trained model to work on TensorFlow: `Translator` (texts in, answers out)
and the SavedModel export."""
