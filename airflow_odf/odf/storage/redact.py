"""The one redactor of URLs in messages: credentials never leave the object that holds them.

A URL's user-info (`user:password@`), query (`?X-Amz-Signature=...`, `?sig=...`) and fragment may carry
secrets; every message, `repr` and error of the storage layer (and the hook) shows URLs through
`redact_url`, and text that may embed URLs (a library's exception message) through `redact_text`.
"""

from __future__ import annotations

import re

HIDDEN = "***"

_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>]+")


def redact_url(url: str) -> str:
    """`scheme://***@host/path?***#***`: user-info, query and fragment hidden, the rest kept so the
    message still says where. Never raises, whatever the text (a plain path is returned as is).

    Conservative where URLs are malformed: everything up to the last `@` before the query is taken
    for user-info (a password may hold a `/`), and any scheme-like text before `://` counts."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url
    end = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    before, after = rest[:end], rest[end:]
    if "@" in before:
        before = f"{HIDDEN}@{before.rpartition('@')[2]}"
    if after:
        after = f"{after[0]}{HIDDEN}"
    return f"{scheme}://{before}{after}"


def redact_text(text: str) -> str:
    """`text` with every URL in it redacted (for messages of other libraries, e.g. botocore's)."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group()), text)
