"""The recipes on TensorFlow: the run harness (fit loop, resume, best weights, model
directories) and train (seq2seq), pretrain and fine_tune (classify), with their configs."""
