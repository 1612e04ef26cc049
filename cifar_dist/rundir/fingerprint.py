"""What the code and the data were when a run started: a fingerprint a resume must match.

The resume policy (``resume_policy.py``) compares settings; the same settings
can still mean another experiment: the builder's source edited (another
activation, same shapes), or the image folder changed (a class folder renamed,
images added: labels permuted). At a run's first start (no checkpoints yet)
the run dir gets ``.cifar_dist_fingerprint.json``; a resume computes it again
and refuses a difference in one line, before Hydra writes anything, unless
``trainer.resume_despite_changes=true`` (then the new fingerprint is recorded).

What is fingerprinted is cheap and needs neither TensorFlow nor the images:

* ``builder``: sha256 of the source file of ``model._target_``'s module;
* ``builder_sources``: sha256 of each module that module imports, directly or
  through another such module, from the user's own code root (the folder on
  ``sys.path`` that holds it; inside an installed package, that package):
  a helper edited from relu to tanh changes it. Found by reading the
  sources (``ast``), never importing them;
* ``data_factory``/``data_factory_sources``: the same for ``data._target_``
  (``data=custom``);
* ``data_files`` (``data=folder``): the class names, the train/test image
  counts, a sha256 of the sorted list of (file path relative to
  ``data.path``, class) pairs of each split, and a sha256 of the images' bytes.
  ``data.path`` itself may change (the same folder moved); its contents may not;
* ``data_bytes`` (CIFAR-10/100, the sample): a sha256 of the bytes of the
  files the data is read from (``data.source_files``): inverted images or
  shifted labels under the same counts change it.

Hashing every byte at each resume would cost seconds for the full CIFAR-10,
so each file's digest is kept in the fingerprint file with its path, size,
mtime and ctime (``file_digests``, never compared) and reused while all four
are the same: a resume then pays a ``stat`` per file. The ctime is there
because the mtime can be set back (``touch -r``, ``cp -p``, rsync) after an
edit in place of the same size; the ctime cannot (the kernel sets it on every
change). A file merely moved, copied or chmod-ed gets a new ctime and is
hashed again, once.

What it still cannot see: what a factory reads (its own files,
a database, the network: only its source is seen); modules imported from
outside the user's code root (installed packages: their versions are in
``metrics.json``); code loaded dynamically (``importlib``, ``exec``); and
anything on a cluster's own disks that this machine cannot read.

A part that cannot be computed (a module not importable from here, a folder
not readable) is left out and not compared: the trainer reports those in its
own words.

What only the loaded data can tell (a factory's or an archive's class names
and image counts: ``data_loaded``) is added by the trainer once rank 0 has
the data (``check_loaded_data``, one call in ``training/trainer.py``): recorded
at a first start, compared on a resume, refused in the same one line on every
rank (rank 0 decides, Horovod broadcasts it).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import json
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from cifar_dist.common.atomic_files import write_json
from cifar_dist.common.errors import CifarDistError
from cifar_dist.data import source_files
from cifar_dist.data.batches import DataError
from cifar_dist.data.folder import split_tree
from cifar_dist.rundir.checkpoints import list_checkpoints

FINGERPRINT = ".cifar_dist_fingerprint.json"
OVERRIDE = "trainer.resume_despite_changes"
CACHE = "file_digests"  # path -> [size, mtime_ns, ctime_ns, sha256]: saves hashing unchanged files again; not compared
OWN_PACKAGE = "cifar_dist"
MAX_SOURCES = 500  # modules followed from one builder: a code root holding a whole project stops somewhere


class FingerprintChanged(CifarDistError):
    """The code or the data differ from what the run dir's checkpoints were trained with."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def module_source_digest(target: Optional[str]) -> Optional[str]:
    """sha256 of the source file of the module that defines ``target`` (``pkg.mod.fn``), found without
    importing that module; None when it cannot be found."""
    if not target or "." not in str(target):
        return None
    try:
        spec = importlib.util.find_spec(str(target).rsplit(".", 1)[0])
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        return _sha256(origin.read_bytes()) if origin is not None and origin.is_file() else None
    except (ImportError, ValueError, OSError):
        return None


def _spec(name: str) -> Optional[Any]:
    """The module spec of ``name`` found on ``sys.path`` without importing it or its packages (None if none)."""
    spec, locations = None, None
    for part in name.split("."):
        if spec is not None and locations is None:
            return None  # a module, not a package: it has no submodules
        try:
            spec = importlib.machinery.PathFinder.find_spec(part, locations)
        except (ImportError, ValueError, OSError):
            return None
        if spec is None:
            return None
        locations = spec.submodule_search_locations
    return spec


def _code_root(module: str, origin: Path) -> Path:
    """Where the user's own code lies: the ``sys.path`` entry holding ``module``; in an installed package's
    folder (site-packages), that package alone."""
    depth = module.count(".") + (origin.name == "__init__.py")
    root = origin.parents[depth] if depth < len(origin.parents) else origin.parent
    if {"site-packages", "dist-packages"} & set(root.parts):
        return origin.parents[depth - 1] if depth else origin
    return root


def _imports(source: bytes, module: str, is_package: bool) -> Iterable[str]:
    """The module names an ``import`` of ``source`` may load (``from p import x``: ``p`` and ``p.x``)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            parts = base.split(".") if base else []
            yield from (".".join(parts[: i + 1]) for i in range(len(parts)))  # the packages a name loads too
            yield from (f"{base}.{alias.name}" if base else alias.name for alias in node.names)


def imported_sources(target: Optional[str]) -> Optional[Dict[str, str]]:
    """sha256 of every module ``target``'s module imports from the user's own code root, directly or through
    another such module, by path relative to that root (the module itself excluded: ``module_source_digest``);
    None when the module cannot be found."""
    if not target or "." not in str(target):
        return None
    module = str(target).rsplit(".", 1)[0]
    if module.split(".")[0] == OWN_PACKAGE:  # a built-in model: its own file is the builder digest
        return None
    spec = _spec(module)
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        return None
    first = Path(spec.origin).resolve()
    root = _code_root(module, first)
    seen: Dict[Path, str] = {}
    queue: List[Tuple[str, Path]] = [(module, first)]
    while queue and len(seen) < MAX_SOURCES:
        name, origin = queue.pop()
        try:
            source = origin.read_bytes()
        except OSError:
            continue
        seen[origin] = _sha256(source)
        for imported in _imports(source, name, origin.name == "__init__.py"):
            if imported.split(".")[0] == OWN_PACKAGE:  # cifar_dist's own modules: its version, not the user's code
                continue
            found = _spec(imported)
            path = Path(found.origin).resolve() if found is not None and found.origin else None
            if path is not None and path.is_file() and path not in seen and path.is_relative_to(root):
                if path.suffix == ".py":
                    queue.append((imported, path))
    seen.pop(first, None)
    return {str(p.relative_to(root)) if p != root else p.name: d for p, d in sorted(seen.items())}


def file_digest(path: Path, cache: Dict[str, list]) -> str:
    """sha256 of ``path``'s bytes, taken from ``cache`` while the path's size, mtime and ctime are what it says
    (an entry of an earlier version, without the ctime, is hashed again); ``cache`` gets the new entry."""
    stat = path.stat()
    key, seen = str(path), [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
    entry = cache.get(key)
    if isinstance(entry, list) and len(entry) == len(seen) + 1 and entry[:-1] == seen:
        return str(entry[-1])
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    cache[key] = [*seen, digest.hexdigest()[:16]]
    return cache[key][-1]


def bytes_digest(root: Path, files: Iterable[Path], cache: Dict[str, list]) -> Optional[str]:
    """One sha256 of ``files``' names (relative to ``root``) and bytes; None when one cannot be read."""
    try:
        lines = [f"{Path(f).relative_to(root)}\t{file_digest(Path(f), cache)}" for f in sorted(files)]
    except (OSError, ValueError):
        return None
    return _sha256("\n".join(lines).encode())


def folder_digest(data_cfg: Any, cache: Optional[Dict[str, list]] = None) -> Optional[Dict[str, Any]]:
    """Class names, counts and the file list of ``data=folder`` (relative to data.path); None if unreadable."""
    if data_cfg.get("path") is None:
        return None
    root = Path(str(data_cfg.path)).expanduser().absolute()
    try:
        train, test, names = split_tree(
            root, float(data_cfg.get("val_fraction", 0.2)), int(data_cfg.get("split_seed", 0))
        )
    except (DataError, OSError):
        return None

    def listing(files) -> str:
        return _sha256("\n".join(f"{Path(p).relative_to(root)}\t{c}" for p, c in sorted(files)).encode())

    found = {
        "class_names": list(names),
        "train_images": len(train),
        "test_images": len(test),
        "train_files": listing(train),
        "test_files": listing(test),
        "bytes": bytes_digest(root, {Path(p) for p, _ in [*train, *test]}, {} if cache is None else cache),
    }
    return {k: v for k, v in found.items() if v is not None}


def data_bytes(data_cfg: Any, cache: Dict[str, list]) -> Optional[str]:
    """The digest of the bytes of the files the data is read from (``data.source_files``), or None."""
    try:
        found = source_files(data_cfg)
    except (DataError, OSError):
        return None
    return bytes_digest(*found, cache) if found else None


def fingerprint(cfg: Any, cache: Optional[Dict[str, list]] = None) -> Dict[str, Any]:
    """The fingerprint of ``cfg``'s code and data (parts that cannot be computed left out). ``cache``: the file
    digests recorded before (``CACHE``), reused for files whose size, mtime and ctime are unchanged; the result
    carries them again."""
    data = cfg.data
    cache = dict(cache or {})
    custom, folder = data.get("name") == "custom", data.get("name") == "folder"
    parts = {
        "builder": module_source_digest(cfg.model.get("_target_")),
        "builder_sources": imported_sources(cfg.model.get("_target_")),
        "data_factory": module_source_digest(data.get("_target_")) if custom else None,
        "data_factory_sources": imported_sources(data.get("_target_")) if custom else None,
        "data_files": folder_digest(data, cache) if folder else None,
        "data_bytes": None if custom or folder else data_bytes(data, cache),
    }
    used = {k: v for k, v in parts.items() if v is not None}
    return {**used, CACHE: cache} if cache else used


def _flat(record: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def differences(old: Dict[str, Any], now: Dict[str, Any]) -> List[str]:
    """What differs, part by part (only parts both sides have)."""
    old_flat, now_flat = (
        _flat({k: v for k, v in old.items() if k != CACHE}),
        _flat({k: v for k, v in now.items() if k != CACHE}),
    )
    return [
        f"{k} (was {old_flat[k]}, now {now_flat[k]})"
        for k in sorted(set(old_flat) & set(now_flat))
        if old_flat[k] != now_flat[k]
    ]


def recorded(run_dir: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads((Path(run_dir) / FINGERPRINT).read_text("utf-8"))
    except (OSError, ValueError):
        return None


def check_resume(run_dir: Path, cfg: Any) -> None:
    """Refuse resuming ``run_dir``'s checkpoints with other code or data, unless the override says so."""
    old = recorded(run_dir)
    if old is None or bool(cfg.trainer.get("resume_despite_changes", False)):
        return
    differing = differences(old, fingerprint(cfg, old.get(CACHE)))
    if differing:
        raise FingerprintChanged(_refusal(run_dir, differing))


def _refusal(run_dir: Path, differing: List[str]) -> str:
    return (
        f"{run_dir} holds checkpoints trained with other code or data: {'; '.join(differing)}. "
        f"Put the old code or data back, re-run with {OVERRIDE}=true to resume anyway, "
        "or choose a new hydra.run.dir"
    )


def loaded_data_problem(run_dir: Path, cfg: Any, data: Any, resuming: bool) -> str:
    """Rank 0: compare (on a resume) and record what the loaded ``data`` is; the refusal, or ""."""
    now = {
        "class_names": [str(n) for n in data.class_names],
        "train_images": int(data.train_size),
        "test_images": int(data.test_size),
    }
    old = recorded(Path(run_dir)) or {}
    accept = bool(cfg.trainer.get("resume_despite_changes", False))
    differing = differences({"data_loaded": old.get("data_loaded", {})}, {"data_loaded": now})
    if resuming and differing and not accept:
        return _refusal(run_dir, differing)
    if old.get("data_loaded") != now:
        write_json(Path(run_dir) / FINGERPRINT, {**old, "data_loaded": now})
    return ""


def check_loaded_data(run: Any, data: Any) -> None:
    """Every rank: refuse resuming with loaded data other than the run's (rank 0 decides; see the module doc)."""
    problem = ""
    if run.world.is_chief:
        resuming = bool(list_checkpoints(run.checkpoint_dir))
        problem = loaded_data_problem(run.output_dir, run.cfg, data, resuming)
    problem = run.engine.broadcast_object(problem)  # ENGINE: every rank learns rank 0's decision
    if problem:
        raise FingerprintChanged(problem)


def record(run_dir: Path, cfg: Any, resuming: bool, kept: Optional[Dict[str, Any]] = None) -> None:
    """Write the fingerprint at a first start, on a resume that accepted changes, or when an earlier run lacks it;
    with ``kept``: parts the file keeps but a resume does not compare here (the stack: ``rundir/stack.py``)."""
    old, kept = recorded(run_dir), kept or {}
    if resuming and old is not None and not bool(cfg.trainer.get("resume_despite_changes", False)):
        if any(old.get(k) != v for k, v in kept.items()):
            write_json(Path(run_dir) / FINGERPRINT, {**old, **kept})
        return
    loaded = {"data_loaded": old["data_loaded"]} if resuming and old and "data_loaded" in old else {}
    write_json(Path(run_dir) / FINGERPRINT, {**fingerprint(cfg, (old or {}).get(CACHE)), **loaded, **kept})
