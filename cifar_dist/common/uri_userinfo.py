"""A URI's ``user:password@`` as a user types it: where it stands in text, what it holds, the URI well formed.

A password is often typed without percent-encoding: base64 holds ``/``, a passphrase spaces, others ``?``, ``#``
or ``@``. So the userinfo runs from ``scheme://`` to the LAST ``@`` that a host follows (a name, an IPv4 or
``[IPv6]`` address, an optional port, then the authority's end: a path, query or fragment, the end of the value,
a quote, a list's comma), percent-encoded or not. The user name holds no ``:``, ``/``, ``?``, ``#``: a userinfo
without a ``:`` is one name (``https://TOKEN@host``), so a path's ``@`` (``git+https://host/repo@v1``) is none.
A password never spans another URI's ``scheme://``.

One rule, read in every form Hydra writes an override in (as typed, quoted, escaped as a sweep's points have it:
``http\\://alice\\:PW@host``), in prose, and where the password is used: MLflow's variables
(``redaction.tracking_credentials``) and the URI handed to MLflow, its userinfo percent-encoded (``well_formed``),
so that a URI typed with a raw ``/`` in its password works. Where the rule cannot tell, it masks: a port followed
by a path that holds ``@`` and a host (``http://host:5000/x?to=a@b.org``) is taken for a password, and so is the
text up to an address after a URI in prose (``http://alice:pw@host/ admin@b.org``).
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional
from urllib.parse import quote, unquote

SCHEME = r"[A-Za-z][A-Za-z0-9+.-]*\\?://"
# What follows a userinfo's last "@": a host and an optional port (escaped in a sweep's points: ``h\:9``), then the
# authority's end.
_HOST_FOLLOWS = r"(?=(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%-]+)(?:\\?:[0-9]*)?(?:$|[/?#\s'\"<>`\\,;)\]}]))"
# An override's ``key=`` (``+launcher.env.X=``, ``group@pkg=``): where a value starts, and where the next one does.
_KEY = r"[+~]{0,2}[\w.@/-]+="


def _userinfo(form: str, stop: str, space: str) -> str:
    """The pattern of ``scheme://user[:password]@`` (groups ``<form>``: the scheme, ``<form>_user``,
    ``<form>_password``): ``stop`` ends both parts, ``space`` is what else a password may hold (white space)."""
    user = rf"(?:\\[^:]|[^:/?#\s\\{stop}])*"
    password = rf"(?:(?!\\?://)(?:\\.|[^\s\\{stop}]|{space}))*"
    return rf"(?P<{form}>{SCHEME})(?P<{form}_user>{user})(?:\\?:(?P<{form}_password>{password}))?@{_HOST_FOLLOWS}"


# Where a URI stands in text decides what its password may hold besides the characters that are not white space:
# - after a quote: anything up to the closing quote;
# - as a value (the text's start, or after an override's ``key=``: ``tracking.uri=http://alice:pw x y@host/``):
#   spaces, tabs and commas, up to the next override (``,trainer.epochs=1``: Hydra's ``override_dirname``);
# - elsewhere (prose): a space or tab only where the next word still reaches an "@" (``pw9 x@host``).
IN_TEXT = re.compile(
    "(?<=')"
    + _userinfo("single", "'", r"\s")
    + '|(?<=")'
    + _userinfo("double", '"', r"\s")
    + rf"|(?P<key>^(?:{_KEY})?|(?<=[\s,]){_KEY})"
    + _userinfo("value", ",'\"<>`", rf"[ \t,](?!{_KEY})")
    + "|"
    + _userinfo("bare", "'\"<>`", r"[ \t](?=\S*@)")
)
_FORMS = ("single", "double", "value", "bare")


class Userinfo(NamedTuple):
    """A URI's userinfo, split: the text before it (``scheme://``), the user, the password (None without a ``:``),
    and the rest of the URI (the host on); user and password as typed (percent-encoded or not)."""

    scheme: str
    user: str
    password: Optional[str]
    rest: str


def without_userinfo(text: str) -> str:
    """``text`` with the ``user:password@`` of every URI in it taken out (``scheme://`` and a ``key=`` kept)."""
    return IN_TEXT.sub(lambda m: (m.group("key") or "") + next(m.group(f) for f in _FORMS if m.group(f)), text)


def split_userinfo(uri: Optional[str]) -> Optional[Userinfo]:
    """The userinfo of ``uri`` (a URI alone), or None where it has none."""
    uri = str(uri or "")
    found = IN_TEXT.match(uri)
    if found is None or found.group("key"):
        return None
    form = next(f for f in _FORMS if found.group(f))
    return Userinfo(found.group(form), found.group(f"{form}_user"), found.group(f"{form}_password"), uri[found.end() :])


def well_formed(uri: str) -> str:
    """``uri`` with its userinfo percent-encoded (``SECRq/w9`` -> ``SECRq%2Fw9``, an encoded one left as it is), as
    clients parse it: a raw ``/`` or ``@`` in a password would otherwise move the host."""
    parts = split_userinfo(uri)
    if parts is None:
        return uri
    userinfo = encoded(parts.user) + ("" if parts.password is None else ":" + encoded(parts.password))
    return f"{parts.scheme}{userinfo}@{parts.rest}"


def encoded(part: str) -> str:
    """A userinfo part percent-encoded once: what is encoded already is decoded first."""
    return quote(unquote(part), safe="")
