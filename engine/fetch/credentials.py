"""Credentials out of what is shown: one rule for every URL a fetcher records, reports or raises."""

from __future__ import annotations

import re

__all__ = ["without_credentials"]

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]*)@")


def without_credentials(text: str) -> str:
    """``text`` (a URL, or a message quoting some) with every password, and HTTP user names, removed.

    An HTTP user name is often a token (``https://TOKEN@github.com/…``), so it goes too; an ssh
    user (``ssh://git@host``) is only an account name and stays. Refreshes authenticate as any
    later fetch of that host does (``~/.netrc``, git's credential helpers).
    """
    def redact(match: re.Match[str]) -> str:
        scheme, userinfo = match["scheme"], match["userinfo"]
        if scheme.lower().removeprefix("git+").startswith(("http", "ftp")):
            return scheme
        user = userinfo.split(":", 1)[0]
        return f"{scheme}{user}@" if user else scheme

    return _USERINFO.sub(redact, text)
