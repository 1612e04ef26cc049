"""azure-core's retry and transport settings, read from the launcher config fields
both Azure launchers share (``retry_total``, ``retry_backoff_factor``,
``retry_backoff_max_s``, ``connection_timeout_s``, ``read_timeout_s``).

Every client call goes through azure-core's pipeline: 429/5xx and timeouts are
retried by its RetryPolicy (honouring Retry-After). Each SDK takes these as
keyword arguments of its client (azure-ai-ml passes them on to every pipeline;
Batch AI's ARM client builds its RetryPolicy from them).
"""

from __future__ import annotations

from typing import Any, Dict


def retry_settings(conf: Any) -> Dict[str, Any]:
    """azure-core RetryPolicy's keywords: how often to retry and how long to back off."""
    return {
        "retry_total": conf.retry_total,
        "retry_backoff_factor": conf.retry_backoff_factor,
        "retry_backoff_max": conf.retry_backoff_max_s,
    }


def transport_timeouts(conf: Any) -> Dict[str, Any]:
    """The transport's keywords: how long to wait for a connection and for a response."""
    return {"connection_timeout": conf.connection_timeout_s, "read_timeout": conf.read_timeout_s}
