"""Micro-batching: concurrent requests coalesced into one engine call.

A request waits in a bounded queue under its key (its decoding options: only
requests decoded alike share a call). One worker takes the oldest waiting
request with up to `max_batch_size` texts of the same key, and runs the
engine on them in a thread of its own, so the server keeps answering
(`/health`, new requests) meanwhile. TensorFlow runs one call on every core,
so calls go one after another, and the requests that arrive during a call
make the next batch. Under load (the last call had more than one request, or
others arrived while it ran) the oldest request also waits up to
`max_wait_ms` for more; a lone client's request is decoded at once.
"""

import asyncio
import collections
import concurrent.futures
import time


class QueueFull(Exception):
    """More requests wait than the queue holds: the server answers 503."""


class MicroBatcher:
    """Runs `run(key, texts) -> results` on batches of waiting requests.

    Args:
        run: the blocking call, `(key, texts) -> list` (one result per text).
        max_batch_size: int. Most texts in one call (1: no batching).
        max_wait_ms: float. How long the oldest request waits for others, under load.
        max_queue: int. Most texts waiting; `submit` raises `QueueFull` beyond.
    """

    def __init__(self, run, max_batch_size=64, max_wait_ms=5.0, max_queue=1024):
        self.run = run
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.waiting = collections.OrderedDict()  # key -> deque of (texts, future, since)
        self.size = 0
        self.loaded = False  # whether the last call showed concurrent requests
        self.arrived = None
        self.worker = None
        self.executor = concurrent.futures.ThreadPoolExecutor(1, "engine")

    async def submit(self, key, texts):
        """The results for `texts`, decoded in some batch with others of `key`."""
        if self.worker is None or self.worker.done():
            self.arrived = asyncio.Event()
            self.worker = asyncio.get_running_loop().create_task(self._work())
        if self.size + len(texts) > self.max_queue:
            raise QueueFull(f"{self.size} texts are waiting")
        future = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(key, collections.deque()).append(
            (list(texts), future, time.monotonic()))
        self.size += len(texts)
        self.arrived.set()
        return await future

    async def _work(self):
        loop = asyncio.get_running_loop()
        while True:
            await self.arrived.wait()
            self.arrived.clear()
            while self.waiting:
                key, queue = next(iter(self.waiting.items()))
                oldest = queue[0][2]
                delay = oldest + self.max_wait - time.monotonic()
                queued = sum(len(texts) for texts, _, _ in queue)
                if self.loaded and delay > 0 and queued < self.max_batch_size:
                    await asyncio.sleep(delay)
                batch = self._take(key, queue)
                if not batch:
                    continue
                texts = [text for request, _ in batch for text in request]
                try:
                    results = await loop.run_in_executor(self.executor, self.run, key, texts)
                    self.loaded = len(batch) > 1 or bool(self.waiting)
                except Exception as error:  # noqa: BLE001  (each request gets the error)
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                start = 0
                for request, future in batch:
                    if not future.done():
                        future.set_result(results[start : start + len(request)])
                    start += len(request)

    def _take(self, key, queue):
        """Up to `max_batch_size` texts of `key`'s oldest requests (a larger
        request alone), leaving out those whose client gave up."""
        batch, count = [], 0
        while queue and (not batch or count + len(queue[0][0]) <= self.max_batch_size):
            texts, future, _ = queue.popleft()
            self.size -= len(texts)
            if not future.done():
                batch.append((texts, future))
                count += len(texts)
        if not queue:
            del self.waiting[key]
        else:
            self.waiting.move_to_end(key)
        return batch
