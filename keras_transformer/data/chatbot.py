"""The book's data set: ChatbotData, 11,823 Korean question/answer pairs.

ChatbotData (https://github.com/songys/Chatbot_data, MIT license) is what the
book's chapter 6 trains its chatbot on: a CSV with columns `Q` (question), `A`
(answer) and `label` (0 everyday, 1 breakup, 2 love). `load_chatbot_data`
downloads the full file once, as the book does, checks it against the
SHA-256 of the copy we know and caches it (like `keras.datasets`); a sample
of 1,000 pairs ships with the package for offline use (tests, the demo, the
notebooks), with the license notice in `chatbot_sample_LICENSE.txt`.
"""

import os

from keras_transformer.data.files import load_chatbot_csv

CHATBOT_DATA_URL = (
    "https://raw.githubusercontent.com/songys/Chatbot_data/master/ChatbotData%20.csv"
)
# The copy we know: 11,823 rows, CRLF line endings.
CHATBOT_DATA_SHA256 = "287eb129695b577321c80ad397bb3c2279164d4ca577874d129fd3db5b30afe2"
CHATBOT_DATA_FILE = "ChatbotData.csv"
SAMPLE_FILE = os.path.join(os.path.dirname(__file__), "chatbot_sample.csv")


def load_chatbot_data(path=None, sample=False, cache_dir=None, columns=("Q", "A")):
    """ChatbotData as `(question, answer)` pairs: downloaded, local or the sample.

    Args:
        path: str. A local copy of the CSV to read instead of downloading.
            Defaults to `None`.
        sample: bool. The 1,000 pairs shipped with the package (no download).
            Defaults to `False`.
        cache_dir: str. Where the download is kept, as in
            `keras.utils.get_file` (`~/.keras/datasets` by default).
        columns: pair of str. The two columns to read: `("Q", "label")` gives
            `(question, topic)` pairs, the topic `"0"` everyday, `"1"` breakup,
            `"2"` love. Defaults to `("Q", "A")`.

    Returns:
        list of str pairs of the two columns, in file order.

    Raises:
        ConnectionError: the download failed (offline, or the address did not
            answer); an `OSError`, so `except OSError` falls back to `sample=True`.
        ValueError: the downloaded file does not match the known SHA-256
            (`keras.utils.get_file`), or a file is malformed (naming file and
            line).

    Example:
    >>> pairs = load_chatbot_data(sample=True)
    >>> len(pairs), all(question and answer for question, answer in pairs)
    (1000, True)
    >>> sorted({label for _, label in load_chatbot_data(sample=True, columns=("Q", "label"))})
    ['0', '1', '2']
    """
    if sample:
        path = SAMPLE_FILE
    elif path is None:
        import keras

        if cache_dir is not None:  # Keras falls back to /tmp when it does not exist
            os.makedirs(cache_dir, exist_ok=True)
        try:
            path = keras.utils.get_file(
                CHATBOT_DATA_FILE,
                CHATBOT_DATA_URL,
                file_hash=CHATBOT_DATA_SHA256,
                hash_algorithm="sha256",
                cache_dir=cache_dir,
            )
        except Exception as error:  # Keras wraps a network error in a bare Exception
            if not isinstance(error.__context__, OSError):
                raise
            raise ConnectionError(
                f"Could not download ChatbotData from {CHATBOT_DATA_URL}: {error}. Pass "
                "`path=` for a local copy or `sample=True` for the 1,000 pairs shipped "
                "with the package."
            ) from error
    return load_chatbot_csv(path, *columns)
