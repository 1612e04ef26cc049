"""Download into the cache from a loopback HTTP server: checked, atomic, once per host."""

import multiprocessing
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from cifar_dist.common.atomic_files import TEMP_SUFFIX
from cifar_dist.config.data_options import Cifar100Config
from cifar_dist.data import DataError, load_dataset
from cifar_dist.data.download import download
from helpers.cifar_fixtures import (
    Route,
    batch_files,
    download_cfg,
    load_in_child,
    md5_of,
    random_batches,
    serve,
    tar_bytes,
    unused_port,
)

TRAIN, TEST = random_batches(n_train_batches=2, per_batch=16, n_test=12, seed=2)
ARCHIVE = tar_bytes(batch_files(TRAIN, TEST))
TAMPERED = ARCHIVE[:-1] + bytes([ARCHIVE[-1] ^ 0xFF])  # same size, different md5
URL_PATH = "/cifar-10-python.tar.gz"
HINT = "point data.path at a copy of cifar-10-python.tar.gz or use data=sample"


def _leftovers(cache: Path) -> list[str]:
    return sorted(
        p.name
        for p in cache.iterdir()
        if p.name.startswith((".download-", ".extract-")) or p.name.endswith(TEMP_SUFFIX)
    )


def test_good_download_is_cached_extracted_and_not_fetched_again(tmp_path):
    cache = tmp_path / "cache"
    with serve({URL_PATH: Route(ARCHIVE)}) as server:
        cfg = download_cfg(cache, server.base_url + URL_PATH, ARCHIVE)
        data = load_dataset(cfg)
        assert np.array_equal(data.x_train, np.concatenate([x for x, _ in TRAIN]))
        assert np.array_equal(data.y_test, TEST[1])
        assert (cache / "cifar-10-python.tar.gz").read_bytes() == ARCHIVE
        assert (cache / "cifar-10-batches-py" / "test_batch").is_file()
        assert data.source == str(cache / "cifar-10-batches-py")
        assert _leftovers(cache) == []

        server.routes[URL_PATH] = Route(TAMPERED)  # a second fetch would now fail loudly
        again = load_dataset(cfg)
        assert np.array_equal(again.x_train, data.x_train)
        assert server.count(URL_PATH) == 1


def test_a_cached_archive_without_its_folder_is_extracted_without_downloading(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "cifar-10-python.tar.gz").write_bytes(ARCHIVE)
    with serve({}) as server:
        data = load_dataset(download_cfg(cache, server.base_url + URL_PATH, ARCHIVE))
        assert server.requests == [] and len(data.x_train) == 32


def test_a_foreign_archive_in_the_cache_is_not_extracted(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "cifar-10-python.tar.gz").write_bytes(TAMPERED)
    with pytest.raises(DataError, match="is not the expected archive.*delete .*cifar-10-python.tar.gz"):
        load_dataset(download_cfg(cache, "http://127.0.0.1:9/x", ARCHIVE))
    assert not (cache / "cifar-10-batches-py").exists()


def test_wrong_md5_is_refused_and_leaves_nothing_behind(tmp_path):
    cache = tmp_path / "cache"
    with serve({URL_PATH: Route(TAMPERED)}) as server:
        with pytest.raises(DataError, match="has md5 .* expected") as err:
            load_dataset(download_cfg(cache, server.base_url + URL_PATH, ARCHIVE))
    assert "\n" not in str(err.value) and HINT in str(err.value)
    assert sorted(p.name for p in cache.iterdir()) == [".cifar-10.lock"]


def test_a_bad_download_never_replaces_a_good_copy(tmp_path):
    good = tmp_path / "cifar-10-python.tar.gz"
    good.write_bytes(ARCHIVE)
    with serve({URL_PATH: Route(TAMPERED), "/short": Route(ARCHIVE, send_bytes=100)}) as server:
        for path in (URL_PATH, "/short", "/missing"):
            with pytest.raises(DataError):
                download(server.base_url + path, good, md5_of(ARCHIVE), len(ARCHIVE), 5.0, HINT)
    assert good.read_bytes() == ARCHIVE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar-10-python.tar.gz"]


@pytest.mark.parametrize(
    "route, message",
    [
        (Route(ARCHIVE, send_bytes=len(ARCHIVE) // 2), "cut short"),  # the connection closes mid-body
        (Route(ARCHIVE[: len(ARCHIVE) // 2]), "cut short"),  # the server has a shorter file
        (Route(ARCHIVE + b"junk"), "larger than data.size_bytes"),
        (Route(b"oops", status=500), "HTTP 500"),
    ],
    ids=["closed-early", "short-file", "too-long", "http-500"],
)
def test_broken_downloads_are_one_line_errors_and_leave_nothing(tmp_path, route, message):
    cache = tmp_path / "cache"
    with serve({URL_PATH: route}) as server:
        with pytest.raises(DataError, match=message) as err:
            load_dataset(download_cfg(cache, server.base_url + URL_PATH, ARCHIVE))
    assert "\n" not in str(err.value) and HINT in str(err.value)
    assert sorted(p.name for p in cache.iterdir()) == [".cifar-10.lock"]


def test_404_server_down_and_timeout_say_to_use_data_path_or_the_sample(tmp_path):
    with serve({"/slow": Route(ARCHIVE, delay_s=2.0)}) as server:
        for url, timeout, message in [
            (server.base_url + "/nothing-here", 5.0, "HTTP 404"),
            (f"http://127.0.0.1:{unused_port()}/x.tar.gz", 5.0, "refused"),
            (server.base_url + "/slow", 0.3, "timed out"),
        ]:
            cache = tmp_path / url.rsplit("/", 1)[-1]
            with pytest.raises(DataError, match=message) as err:
                load_dataset(download_cfg(cache, url, ARCHIVE, download_timeout_s=timeout))
            text = str(err.value)
            assert "\n" not in text and url in text and text.endswith(HINT)
            assert not (cache / "cifar-10-batches-py").exists() and _leftovers(cache) == []


def test_offline_and_not_cached_says_what_to_do_and_touches_nothing(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=f"data.download=false; {HINT}$"):
        load_dataset(download_cfg(cache, "http://127.0.0.1:9/x", ARCHIVE, download=False))
    assert not cache.exists()


@pytest.mark.parametrize("download_on", [False, True], ids=["download-false", "offline"])
def test_cifar100_without_its_archive_names_cifar100s_archive_not_cifar10s(tmp_path, download_on):
    """issue 31 (new user 4): the hint named cifar-10-python.tar.gz and data=sample (CIFAR-10) for CIFAR-100."""
    cfg = OmegaConf.structured(
        Cifar100Config(
            cache_dir=str(tmp_path / "cache"),
            download=download_on,
            url=f"http://127.0.0.1:{unused_port()}/cifar-100-python.tar.gz",
        )
    )
    with pytest.raises(DataError) as err:
        load_dataset(cfg)
    text = str(err.value)
    assert "\n" not in text and text.endswith("point data.path at a copy of cifar-100-python.tar.gz"), text
    assert "cifar-10-python" not in text and "data=sample" not in text, text


def test_unknown_data_name_lists_the_valid_ones():
    with pytest.raises(DataError, match="data.name='imagenet' .* cifar10, sample"):
        load_dataset(OmegaConf.create({"name": "imagenet"}))


def test_two_processes_at_once_download_once_and_both_load(tmp_path):
    cache = tmp_path / "cache"
    spawn = multiprocessing.get_context("spawn")  # the parent may have TensorFlow threads; never fork it
    barrier, results = spawn.Barrier(2), spawn.Queue()
    # The delay keeps the first download in flight while the second process reaches the lock.
    with serve({URL_PATH: Route(ARCHIVE, delay_s=1.0)}) as server:
        cfg_yaml = OmegaConf.to_yaml(download_cfg(cache, server.base_url + URL_PATH, ARCHIVE))
        children = [spawn.Process(target=load_in_child, args=(cfg_yaml, barrier, results)) for _ in range(2)]
        for child in children:
            child.start()
        outcomes = [results.get(timeout=60) for _ in children]
        for child in children:
            child.join(timeout=30)
        assert [c.exitcode for c in children] == [0, 0]
    assert [status for status, _ in outcomes] == ["ok", "ok"], outcomes
    assert outcomes[0][1] == outcomes[1][1]
    assert server.count(URL_PATH) == 1
    assert _leftovers(cache) == []
