#!/usr/bin/env python3
"""Build the real-image CIFAR-10 sample that ships inside the package.

The images are real CIFAR-10 (Krizhevsky, 2009, "Learning Multiple Layers of
Features from Tiny Images", https://www.cs.toronto.edu/~kriz/cifar.html):
the first 1,017 images of each of data_batch_1..4 and test_batch, with their
labels, and the original batches.meta, as prepared in the shared subset
``../shared/data/cifar10-subset`` (see its README). That gives 4,068 train and
1,017 test images, so ``data=sample`` trains and tests with real pictures and
no network, far below full-data accuracy.

The batch files are copied byte for byte into a gzip tarball with the layout
of ``cifar-10-python.tar.gz`` (``cifar-10-batches-py/<file>``). Member order,
mtimes, owners and modes are fixed and the gzip header has mtime 0 and no
file name, so rebuilding from the same files gives the same bytes (and git
sees no change). Each file is decoded with the package's own reader first,
so a broken source never becomes the sample.

    python scripts/make_sample.py [--source DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import io
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cifar_dist.data.batches import BATCH_DIR, META, TEST_BATCH, decode_class_names, read_images, unpickle  # noqa: E402

DEFAULT_SOURCE = REPO.parent / "shared" / "data" / "cifar10-subset" / BATCH_DIR
DEFAULT_OUT = REPO / "cifar_dist" / "data" / "sample" / "cifar-10-sample.tar.gz"
FILES = (META, "data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", TEST_BATCH)
# 2009-03-31, roughly when the original archive was published; any constant works.
MTIME = 1238457600
MAX_BYTES = 16 * 2**20


def _info(name: str, size: int, is_dir: bool) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if is_dir else 0o644
    info.size = 0 if is_dir else size
    info.mtime = MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def build(source: Path, out: Path) -> int:
    """Write the tarball; returns its size in bytes."""
    blobs = {}
    for name in sorted(FILES):
        raw = (source / name).read_bytes()
        where, fix = str(source / name), "fix the source folder"
        if name == META:
            decode_class_names(unpickle(raw, where, fix), where, fix)
        else:
            images, _ = read_images(raw, where, fix)
            print(f"{name}: {len(images)} images")
        blobs[name] = raw

    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            tar.addfile(_info(BATCH_DIR, 0, is_dir=True))
            for name, raw in blobs.items():
                tar.addfile(_info(f"{BATCH_DIR}/{name}", len(raw), is_dir=False), io.BytesIO(raw))
    data = buffer.getvalue()
    if len(data) > MAX_BYTES:
        raise SystemExit(f"error: the sample is {len(data)} bytes, over the {MAX_BYTES}-byte budget; use fewer images")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)
    return len(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source", type=Path, default=DEFAULT_SOURCE, help="a cifar-10-batches-py folder (default: %(default)s)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the tarball to write (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        parser.error(f"{args.source} is not a folder; pass --source pointing at a cifar-10-batches-py folder")
    size = build(args.source, args.out)
    print(f"wrote {args.out} ({size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
