"""azure-core's exceptions as one-line LaunchErrors that name the action and say what to do."""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from cifar_dist.common.redaction import redact_text
from cifar_dist.launchers.base import LaunchError

ARM_AUTH_HINT = (
    "sign in with `az login` (or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET) "
    "and check launcher.subscription_id"
)


@contextlib.contextmanager
def azure_errors(action: str, secret: Optional[str] = None, auth_hint: str = ARM_AUTH_HINT) -> Iterator[None]:
    """Turn SDK exceptions into LaunchErrors naming ``action`` and what to do; ``secret`` (a storage key)
    and every known secret masked in them (defence in depth: the text comes from service replies)."""
    # lazy: the azure extra (not installed for the other launchers)
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
        ServiceRequestTimeoutError,
        ServiceResponseError,
        ServiceResponseTimeoutError,
    )

    try:
        yield
    except (ServiceRequestTimeoutError, ServiceResponseTimeoutError) as exc:
        # azure-core's RetryPolicy ran out of launcher.retry_timeout_s (the
        # service kept answering 429/5xx, or not at all): not a network typo.
        raise LaunchError(
            redact_text(
                f"Azure did not let us {action} within launcher.retry_timeout_s of retries ({first_line(str(exc))}); "
                "the service is throttled or unavailable: re-run later (the launch is idempotent) "
                "or raise launcher.retry_timeout_s",
                extra=secret,
            )
        ) from None
    except ClientAuthenticationError as exc:
        detail = first_line(getattr(exc, "message", None) or str(exc))
        raise LaunchError(
            redact_text(
                f"Azure rejected the credentials while trying to {action} ({detail}); {auth_hint}",
                extra=secret,
            )
        ) from None
    except (ServiceRequestError, ServiceResponseError) as exc:
        raise LaunchError(
            redact_text(
                f"cannot reach Azure to {action}: {first_line(str(exc))}; check the network and endpoints", extra=secret
            )
        ) from None
    except HttpResponseError as exc:
        code = getattr(getattr(exc, "error", None), "code", None) or exc.reason or ""
        message = getattr(getattr(exc, "error", None), "message", None) or str(exc)
        raise LaunchError(
            redact_text(
                f"Azure refused to {action}: HTTP {exc.status_code} {code}: {first_line(message)}", extra=secret
            )
        ) from None


def first_line(text: str) -> str:
    """The first non-blank line of a service's message (they run to pages), or "no details"."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else "no details"
