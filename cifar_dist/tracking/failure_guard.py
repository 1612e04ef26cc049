"""The tracker never makes a job fail: its first error becomes one warning line, then it stays quiet."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, TypeVar

from cifar_dist.common.redaction import redact_text

log = logging.getLogger("cifar_dist.tracking")
T = TypeVar("T")

# urllib3 warns once per retry ("Retrying (Retry(total=1...)) after connection
# broken by ..."); those lines would repeat what the one warning says.
QUIET_LOGGERS = ("urllib3.connectionpool", "urllib3.util.retry")


class Guard:
    """Runs tracker calls; after the first failure every later call is skipped.

    One failure stands for the tracker being unreachable or broken for the
    rest of the job: trying again at every epoch would cost the HTTP timeout
    each time and print as many warnings. What was not sent is in the run dir
    and ``python -m cifar_dist.tracking import <run dir>`` sends it later.
    """

    def __init__(self, where: str, run_dir: Any):
        self.where = where
        self.run_dir = run_dir
        self.failed = False
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Optional[T]:
        if self.failed:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # any tracker error: the job goes on
            self.failed = True
            log.warning(
                "tracking: %s failed at %s (%s); the job goes on without the tracker; send what is missing later "
                "with: python -m cifar_dist.tracking import %s",
                what,
                self.where,
                one_line(exc),
                self.run_dir,
            )
            return None


def one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(redact_text(f"{type(exc).__name__}: {exc}").split())  # MLflow's errors name the URL
    return text if len(text) <= limit else text[: limit - 3] + "..."
