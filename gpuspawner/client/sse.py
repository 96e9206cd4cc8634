"""Server-sent events from byte chunks (the service's log streams). Pure."""
from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional


@dataclass
class SSEEvent:
    event: str = "message"
    data: str = ""
    id: Optional[str] = None


def iter_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Lines (without their ending) from byte chunks split anywhere, as the
    SSE format defines them: ending in CRLF, LF or CR; UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    buf = ""
    for chunk in chunks:
        text = decoder.decode(chunk)
        if not text:
            continue
        scan = max(len(buf) - 1, 0)  # what came before has no line end (but a last CR)
        buf += text
        start = 0
        while True:
            m = _EOL.search(buf, max(start, scan))
            if m is None:
                break
            if m.group() == "\r" and m.end() == len(buf):
                break  # a CR at the end of a chunk may be the first half of a CRLF
            yield buf[start:m.start()]
            start = m.end()
        buf = buf[start:]
    buf += decoder.decode(b"", final=True)
    if buf:
        lines = _EOL.split(buf)
        if lines and lines[-1] == "":
            lines.pop()
        yield from lines  # what is left of a stream that was cut


_EOL = re.compile(r"\r\n|\r|\n")


def iter_sse(lines: Iterable[str]) -> Iterator[SSEEvent]:
    """Events from SSE lines: ``event:``, ``data:`` (joined with newlines),
    ``id:``; comments and unknown fields are skipped. An event is dispatched
    at a blank line only, so one cut off mid-way is never yielded."""
    event, data, eid, has_data = "", [], None, False
    for line in lines:
        if line == "":
            if has_data:
                yield SSEEvent(event or "message", "\n".join(data), eid)
            event, data, has_data = "", [], False
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
            has_data = True
        elif name == "id" and "\x00" not in value:
            eid = value
