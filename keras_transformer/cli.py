"""Command line: `python -m keras_transformer demo`.

`demo` trains the tutorial's Transformer (small sizes) with `model.fit` on a
task the package generates (reversing token sequences), decodes a held-out
test split with greedy and beam search, prints samples, and ends with one JSON
line `{"exact_match": .., "seconds": ..}`.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def exact_match(predicted, targets, end_token_idx):
    """Fraction of rows whose tokens up to and including `<END>` equal the target."""
    hits = 0
    for row, target in zip(predicted, targets):
        want = list(target[: list(target).index(end_token_idx) + 1])
        hits += list(row[: len(want)]) == want
    return hits / len(targets)


def demo(args):
    import keras

    import keras_transformer as kt
    from keras_transformer.data import reverse_task

    start = time.time()
    keras.utils.set_random_seed(args.seed)
    vocab_size, max_len = 24, 10
    kargs = {
        "model_name": "transformer",
        "num_layers": 2,
        "d_model": 64,
        "num_heads": 4,
        "dff": 128,
        "input_vocab_size": vocab_size,
        "target_vocab_size": vocab_size,
        "maximum_position_encoding": max_len + 1,
        "end_token_idx": 2,
        "rate": 0.1,
    }
    print(f"kargs = {kargs}", file=sys.stderr)
    train = reverse_task(4000, vocab_size, max_len=max_len, seed=args.seed)
    test_inp, _, test_out = reverse_task(500, vocab_size, max_len=max_len, seed=args.seed + 1)

    model = kt.Transformer(**kargs)
    optimizer = keras.optimizers.Adam(
        kt.CustomSchedule(kargs["d_model"], warmup_steps=400), beta_1=0.9, beta_2=0.98,
        epsilon=1e-9,
    )
    model.compile(optimizer, loss=kt.masked_loss, metrics=[kt.masked_accuracy])
    index_inputs, index_outputs, index_targets = train
    model.fit(
        [index_inputs, index_outputs],
        index_targets,
        batch_size=64,
        epochs=args.epochs,
        validation_split=0.1,
        verbose=1 if sys.stderr.isatty() else 2,
    )

    greedy = model.generate(test_inp).numpy()
    beam = model.generate(test_inp, method="beam", beam_size=4).numpy()
    for row in range(3):
        print(f"source {test_inp[row][test_inp[row] > 0].tolist()}", file=sys.stderr)
        print(f"  greedy {model.inference(test_inp[row])}", file=sys.stderr)
        print(f"  beam   {beam[row][beam[row] > 2].tolist()}", file=sys.stderr)
    result = {
        "exact_match": round(exact_match(greedy, test_out, model.end_token_idx), 4),
        "exact_match_beam": round(exact_match(beam, test_out, model.end_token_idx), 4),
        "seconds": round(time.time() - start, 1),
    }
    print(json.dumps(result))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m keras_transformer")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser(
        "demo", help="train on a built-in toy task and report exact match"
    )
    demo_parser.add_argument("--epochs", type=int, default=30)
    demo_parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return demo(args)
