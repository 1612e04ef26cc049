"""A TokenCredential for the fake ARM server: hands out whatever token
$FAKE_AZURE_TOKEN holds (the server accepts only the one it was told).
Selected with ``launcher.credential=fake_azure.credential.FakeTokenCredential``."""

from __future__ import annotations

import os
import time

from azure.core.credentials import AccessToken


class FakeTokenCredential:
    def get_token(self, *scopes, **kwargs) -> AccessToken:
        return AccessToken(os.environ["FAKE_AZURE_TOKEN"], int(time.time()) + 3600)

    def close(self) -> None:
        pass
