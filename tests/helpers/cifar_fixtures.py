"""Helpers for tests that need CIFAR-format data: batch pickles, tarballs, folders and a loopback HTTP server.

Files are written the way the original ``cifar-10-python.tar.gz`` lays them
out (``cifar-10-batches-py/data_batch_N``, ``test_batch``, ``batches.meta``;
dicts with bytes keys pickled with protocol 2), so the real loading code reads
them exactly as it reads the real archive. Import with
``from helpers.cifar_fixtures import ...`` (pytest's pythonpath puts ``tests/`` on sys.path).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import pickle
import socket
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
BATCH_DIR = "cifar-10-batches-py"

Batch = tuple[np.ndarray, np.ndarray]  # (uint8 NHWC images, int labels)


def batch_bytes(images: np.ndarray, labels: Sequence[int], batch_label: bytes = b"training batch") -> bytes:
    """One batch file: NHWC images stored as channel-planar rows, as CIFAR does."""
    rows = np.ascontiguousarray(np.asarray(images, dtype=np.uint8).transpose(0, 3, 1, 2)).reshape(len(images), -1)
    return pickle.dumps({b"batch_label": batch_label, b"labels": [int(v) for v in labels], b"data": rows}, protocol=2)


def meta_bytes(class_names: Sequence[str] = CLASS_NAMES) -> bytes:
    return pickle.dumps(
        {b"num_cases_per_batch": 10000, b"label_names": [n.encode() for n in class_names], b"num_vis": 3072}, protocol=2
    )


def random_batches(
    n_train_batches: int = 2, per_batch: int = 16, n_test: int = 16, seed: int = 0
) -> tuple[list[Batch], Batch]:
    """Random pixels and labels; every class appears in each batch of >= 10 images."""
    rng = np.random.default_rng(seed)

    def batch(n: int) -> Batch:
        labels = rng.permutation(np.arange(n) % 10).astype(np.int64)
        return rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8), labels

    return [batch(per_batch) for _ in range(n_train_batches)], batch(n_test)


def sample_batches(per_batch: int | None = None) -> tuple[list[Batch], Batch]:
    """The packaged sample's images split back into its four train batches (first ``per_batch`` of each)."""
    from omegaconf import OmegaConf

    from cifar_dist.config.schema import DataConfig
    from cifar_dist.data import load_dataset

    data = load_dataset(OmegaConf.structured(DataConfig(name="sample")))
    size = len(data.x_train) // 4
    n = per_batch or size
    train = [(data.x_train[i * size : i * size + n], data.y_train[i * size : i * size + n]) for i in range(4)]
    return train, (data.x_test[:n], data.y_test[:n])


def tiny_dataset(folder: Path):
    """The ``tiny_data`` fixture's folder as the trainer reads it (``data=cifar10`` on it, as ``tiny_cifar`` says)."""
    from omegaconf import OmegaConf

    from cifar_dist.config.schema import DataConfig
    from cifar_dist.data import load_dataset

    return load_dataset(OmegaConf.structured(DataConfig(name="cifar10", path=str(folder), download=False)))


def sample_arrays(per_batch: int | None = None) -> tuple[np.ndarray, np.ndarray, Batch]:
    """``sample_batches``' train batches as one (images, labels), and its test batch."""
    train, test = sample_batches(per_batch)
    return np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]), test


def data_cfg(schema, **values):
    """A data option's node: its schema with ``values`` merged in."""
    from omegaconf import OmegaConf

    return OmegaConf.merge(OmegaConf.structured(schema), values)


def batch_files(train: Sequence[Batch], test: Batch, class_names: Sequence[str] = CLASS_NAMES) -> dict[str, bytes]:
    """File name -> bytes for a whole ``cifar-10-batches-py`` folder."""
    files = {"batches.meta": meta_bytes(class_names)}
    for i, (x, y) in enumerate(train, start=1):
        files[f"data_batch_{i}"] = batch_bytes(x, y, f"training batch {i} of {len(train)}".encode())
    files["test_batch"] = batch_bytes(*test, b"testing batch 1 of 1")
    return files


def write_folder(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, raw in files.items():
        (folder / name).write_bytes(raw)
    return folder


def tar_bytes(files: dict[str, bytes], extra: Iterable[tuple[tarfile.TarInfo, bytes | None]] = ()) -> bytes:
    """A gzip tarball with ``files`` under ``cifar-10-batches-py/``, plus ``extra`` raw members (links, odd paths)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        folder = tarfile.TarInfo(BATCH_DIR)
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        for name, raw in files.items():
            info = tarfile.TarInfo(f"{BATCH_DIR}/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
        for info, raw in extra:
            if raw is not None:
                info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw) if raw is not None else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    """A raw tar member header, for building hostile archives."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def md5_of(raw: bytes) -> str:
    return hashlib.md5(raw).hexdigest()


def download_cfg(cache_dir: Path, url: str, archive: bytes, **overrides):
    """A ``data`` config node for name=cifar10 whose md5/size are those of ``archive``."""
    from omegaconf import OmegaConf

    from cifar_dist.config.schema import DataConfig

    cfg = DataConfig(
        name="cifar10",
        cache_dir=str(cache_dir),
        url=url,
        md5=md5_of(archive),
        size_bytes=len(archive),
        download_timeout_s=5.0,
    )
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return OmegaConf.structured(cfg)


@dataclass
class Route:
    """What the loopback server answers for one path."""

    body: bytes = b""
    status: int = 200
    send_bytes: int | None = None  # send only this many body bytes, then close (Content-Length stays full)
    delay_s: float = 0.0  # wait before answering


@dataclass
class LoopbackServer:
    base_url: str
    routes: dict[str, Route]
    requests: list[str] = field(default_factory=list)

    def count(self, path: str) -> int:
        return sum(1 for p in self.requests if p == path)


@contextlib.contextmanager
def serve(routes: dict[str, Route]):
    """An HTTP server on 127.0.0.1 (a free port) in a thread; yields a LoopbackServer whose routes can change live."""
    state = LoopbackServer(base_url="", routes=routes)
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            with lock:
                state.requests.append(self.path)
            route = state.routes.get(self.path)
            if route is None:
                self.send_error(404)
                return
            time.sleep(route.delay_s)
            self.send_response(route.status)
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            body = route.body if route.send_bytes is None else route.body[: route.send_bytes]
            try:
                self.wfile.write(body)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):  # the client gave up first (a timeout test)
                pass
            self.close_connection = True

        def log_message(self, *args):  # keep test output clean
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def unused_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_in_child(cfg_yaml: str, barrier, results) -> None:
    """multiprocessing target: wait for the sibling, load, report (checksum of the arrays or the error)."""
    from omegaconf import OmegaConf

    from cifar_dist.data import load_dataset

    barrier.wait(timeout=30)
    try:
        data = load_dataset(OmegaConf.create(cfg_yaml))
        results.put(("ok", hashlib.md5(data.x_train.tobytes() + data.y_train.tobytes()).hexdigest()))
    except Exception as exc:  # reported to the parent, which fails the test with it
        results.put(("error", f"{type(exc).__name__}: {exc}"))


CIFAR100_DIR = "cifar-100-python"


def cifar100_labels(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fine, coarse) labels for CIFAR-10 labels: fine = 10 * label + position % 10, coarse = fine // 5.

    Every one of the 100 fine and 20 coarse classes occurs, and each fine
    class holds images of one CIFAR-10 class only.
    """
    fine = (np.asarray(labels, np.int64) * 10 + np.arange(len(labels)) % 10).astype(np.int64)
    return fine, fine // 5


def cifar100_files(per_batch: int | None = None) -> dict[str, bytes]:
    """A CIFAR-100-format ``cifar-100-python`` folder (``train``, ``test``, ``meta``) built from the packaged sample.

    The pixels are the packaged CIFAR-10 sample's real images; the labels are
    *remapped* CIFAR-10 labels (``cifar100_labels``), not CIFAR-100's, since
    the real CIFAR-100 archive (161 MB) is not downloaded by the tests. The
    pickles have the real archive's keys (``data``, ``fine_labels``,
    ``coarse_labels``; meta's ``fine_label_names`` / ``coarse_label_names``).
    """
    train, test = sample_batches(per_batch)
    x_train = np.concatenate([x for x, _ in train])
    y_train = np.concatenate([y for _, y in train])

    def split(images: np.ndarray, labels: np.ndarray, name: bytes) -> bytes:
        fine, coarse = cifar100_labels(labels)
        rows = np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(len(images), -1)
        return pickle.dumps(
            {
                b"batch_label": name,
                b"fine_labels": fine.tolist(),
                b"coarse_labels": coarse.tolist(),
                b"data": rows,
                b"filenames": [f"{i}.png".encode() for i in range(len(images))],
            },
            protocol=2,
        )

    meta = {
        b"fine_label_names": [f"{CLASS_NAMES[i // 10]}_{i % 10}".encode() for i in range(100)],
        b"coarse_label_names": [f"{CLASS_NAMES[i // 2]}_{i % 2}".encode() for i in range(20)],
    }
    return {
        "train": split(x_train, y_train, b"training batch 1 of 1"),
        "test": split(*test, b"testing batch 1 of 1"),
        "meta": pickle.dumps(meta, protocol=2),
    }


def cifar100_tarball(path: Path, per_batch: int | None = None) -> Path:
    """``cifar-100-python.tar.gz``-style archive of ``cifar100_files`` at ``path``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.addfile(member(CIFAR100_DIR, tarfile.DIRTYPE))
        for name, raw in cifar100_files(per_batch).items():
            info = member(f"{CIFAR100_DIR}/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    path.write_bytes(buf.getvalue())
    return path


def write_png_tree(root: Path, splits: dict[str, Batch], class_names: Sequence[str] = CLASS_NAMES) -> Path:
    """``root/<split>/<class name>/<index>.png`` for each split's (images, labels): the pixels exactly, lossless."""
    from PIL import Image

    for split, (images, labels) in splits.items():
        for i, (image, label) in enumerate(zip(images, labels)):
            folder = root / split / class_names[int(label)] if split else root / class_names[int(label)]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.asarray(image, np.uint8)).save(folder / f"{i:05d}.png")
    return root
