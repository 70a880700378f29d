"""The server-sent events parser (WHATWG HTML "Server-sent events"): UTF-8, CR/LF/CRLF, fields, linear time, the event cap."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strategies import cut, sse_cuts, sse_events, sse_line_ends
from yiemagent.llm._sse import SSEError, SSEEvent, SSEParser


def parse(*chunks: bytes, **kwargs) -> list[SSEEvent]:
    parser = SSEParser(**kwargs)
    events = [e for chunk in chunks for e in parser.feed(chunk)]
    return events + parser.close()


def test_stream_is_utf8_whatever_the_bytes():
    """Bytes are decoded as UTF-8 (never ISO-8859-1): an em dash arrives as one character, even split in two chunks."""
    dash = "—".encode()
    assert parse(b"data: a" + dash[:1], dash[1:] + b"b\n\n") == [SSEEvent("message", "a—b")]


def test_invalid_utf8_becomes_replacement_characters():
    """A byte that is not UTF-8 becomes U+FFFD, as the standard's decoder does."""
    assert parse(b"data: \xff\n\n") == [SSEEvent("message", "\ufffd")]


def test_only_cr_lf_and_crlf_end_lines():
    """U+0085, U+2028 and U+2029 inside data are ordinary characters; CR, LF and CRLF each end a line."""
    body = "data: a\u0085b\u2028c\u2029d\rdata: e\r\ndata: f\n\n".encode()
    assert parse(body) == [SSEEvent("message", "a\u0085b\u2028c\u2029d\ne\nf")]


def test_crlf_split_between_chunks_is_one_line_end():
    """A CR ending one chunk and the LF starting the next make one line end, not an empty line between."""
    assert parse(b"data: a\r", b"\ndata: b\r\n\r\n") == [SSEEvent("message", "a\nb")]


def test_fields_comments_and_unknown_fields():
    """event/id/retry are read; comments and unknown fields are ignored; one space after the colon is dropped, not two."""
    parser = SSEParser()
    events = parser.feed(b": keep-alive\nevent: delta\nid: 7\nretry: 1500\nfoo: bar\ndata:  x\ndata\n\n")
    assert events == [SSEEvent("delta", " x\n", "7")] and parser.retry == 1500


def test_id_with_nul_is_ignored_and_the_last_id_carries_over():
    """An id containing NUL is ignored (the standard's rule); events without an id keep the last one."""
    assert parse(b"id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\n") == [SSEEvent("message", "a", "1"), SSEEvent("message", "b", "1")]


def test_event_without_data_is_not_dispatched_and_type_resets():
    """A blank line after only an event field dispatches nothing; the next event has the default type."""
    assert parse(b"event: x\n\ndata: y\n\n") == [SSEEvent("message", "y")]


def test_leading_bom_is_dropped_once():
    """One leading BOM is dropped; a second is data."""
    assert parse(b"\xef\xbb\xbf", b"data: \xef\xbb\xbfx\n\n") == [SSEEvent("message", "\ufeffx")]


def test_unfinished_event_at_end_is_discarded():
    """An event with no blank line after it when the stream ends is not dispatched."""
    assert parse(b"data: whole\n\ndata: cut") == [SSEEvent("message", "whole")]


def test_one_event_larger_than_the_cap_raises():
    """An event over max_event_bytes raises SSEError saying so, whether its data comes in one line or many, one chunk or many."""
    with pytest.raises(SSEError, match="exceeds 100 bytes"):
        parse(b"data: " + b"x" * 200 + b"\n\n", max_event_bytes=100)
    with pytest.raises(SSEError, match="exceeds 100 bytes"):
        parse(*[b"data: " + b"y" * 30 + b"\n"] * 5, max_event_bytes=100)
    with pytest.raises(SSEError):
        parse(*[b"z" * 30] * 5, max_event_bytes=100)


def test_events_under_the_cap_pass_and_the_count_restarts_per_event():
    """Many events each under the cap parse, though together they exceed it."""
    assert len(parse(b"data: " + b"x" * 80 + b"\n\n", b"data: " + b"x" * 80 + b"\n\n", max_event_bytes=100)) == 2


def encode(events, line_end: str) -> bytes:
    lines = []
    for event in events:
        lines.append(": a comment")
        if event["event"]:
            lines.append(f"event: {event['event']}")
        if event["id"] is not None:
            lines.append(f"id: {event['id']}")
        lines += [f"data: {d}" for d in event["data"]]
        lines.append("")
    return "".join(line + line_end for line in lines).encode()


def expected(events) -> list[SSEEvent]:
    out, last_id = [], ""
    for event in events:
        last_id = event["id"] if event["id"] is not None else last_id
        out.append(SSEEvent(event["event"] or "message", "\n".join(event["data"]), last_id))
    return out


@given(st.data(), sse_events, sse_line_ends)
def test_any_chunking_parses_to_the_same_events(data, events, line_end):
    """Any events, with any of the three line ends, cut into chunks at arbitrary byte positions, parse to exactly those events."""
    body = encode(events, line_end)
    chunks = cut(body, data.draw(sse_cuts(len(body))))
    assert parse(*chunks) == expected(events)


def test_a_first_event_of_exactly_the_cap_passes_and_one_byte_more_raises():
    """The cap counts a data line's bytes and its newline from the first byte of the stream: an event of exactly max_event_bytes passes, one byte more raises."""
    line = b"data: " + b"x" * 93  # 99 bytes and its newline: 100
    assert parse(line + b"\n\n", max_event_bytes=100) == [SSEEvent("message", "x" * 93)]
    with pytest.raises(SSEError, match="exceeds 100 bytes"):
        parse(line + b"x\n\n", max_event_bytes=100)


def test_an_unfinished_first_line_of_exactly_the_cap_is_kept_and_one_byte_more_raises():
    """Bytes of a line not yet ended count against the cap from the first chunk: exactly max_event_bytes of them wait for the rest, one more raises."""
    parser = SSEParser(max_event_bytes=100)
    assert parser.feed(b"data: " + b"y" * 94) == []
    with pytest.raises(SSEError):
        SSEParser(max_event_bytes=100).feed(b"data: " + b"y" * 95)


@pytest.mark.parametrize("value", ["soon", "-5", "1.5", "\u0661\u0662"], ids=["word", "negative", "fraction", "arabic-digits"])
def test_retry_is_none_until_a_valid_retry_field_and_an_invalid_one_changes_nothing(value):
    """retry holds the last retry: value made of ASCII digits only; before any it is None, and an invalid one is ignored."""
    parser = SSEParser()
    assert parser.retry is None
    parser.feed(f"retry: {value}\n".encode())
    assert parser.retry is None
    parser.feed(b"retry: 250\n")
    parser.feed(f"retry: {value}\n".encode())
    assert parser.retry == 250


def test_an_event_of_two_data_lines_is_capped_on_their_sum_and_the_next_event_starts_from_zero():
    """Each data line counts its bytes and a newline: two lines of exactly max_event_bytes together pass, one byte more raises; after a dispatch the next event may again use it all."""
    first, second = b"data: " + b"a" * 43, b"data: " + b"b" * 44  # 50 and 51 bytes with their newlines
    assert parse(first + b"\n" + second[:-1] + b"\n\n" + first + b"\n" + second[:-1] + b"\n\n", max_event_bytes=100) == [SSEEvent("message", "a" * 43 + "\n" + "b" * 43)] * 2
    with pytest.raises(SSEError):
        parse(first + b"\n" + second + b"\n\n", max_event_bytes=100)


def test_a_lone_colon_is_an_empty_comment():
    """A line that is only ":" is a comment: ignored, the event around it intact."""
    assert parse(b"data: a\n:\ndata: b\n\n") == [SSEEvent("message", "a\nb")]


def test_a_bom_starting_a_later_line_is_not_dropped():
    """Only the stream's first line may start with a BOM that is dropped: at a later line's start it is part of the field name, an unknown field."""
    assert parse(b"data: a\n\xef\xbb\xbfdata: b\n\n") == [SSEEvent("message", "a")]


def test_an_unfinished_line_after_a_whole_event_in_one_chunk_counts_only_its_own_bytes():
    """One chunk holding a dispatched event and the start of the next line: only that start counts against the next event's cap."""
    parser = SSEParser(max_event_bytes=100)
    assert parser.feed(b"data: " + b"a" * 50 + b"\n\n" + b"data: " + b"y" * 54) == [SSEEvent("message", "a" * 50)]
    assert parser.feed(b"\n\n") == [SSEEvent("message", "y" * 54)]


def reference_parse(body: bytes, max_event_bytes=None) -> list[SSEEvent]:
    """WHATWG "Parsing an event stream", read as plainly as it is written: the whole stream
    decoded at once, split at CRLF, CR or LF, each line taken in turn (no size cap)."""
    text = body.decode("utf-8", errors="replace").removeprefix("\ufeff")
    lines = re.split("\r\n|\r|\n", text)
    lines.pop()  # the line not ended when the stream ends is discarded
    events, data, event_type, last_id = [], [], "", ""
    for line in lines:
        if not line:
            if data:
                events.append(SSEEvent(event_type or "message", "\n".join(data), last_id))
            data, event_type = [], ""
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        value = value[1:] if colon and value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event_type = value
        elif name == "id" and "\0" not in value:
            last_id = value
    return events


# byte soup built of the pieces that matter to the parser: field names with and without the
# space, line ends of the three kinds, a BOM, a byte that is not UTF-8 and a multi-byte character
sse_soup = st.lists(
    st.sampled_from([b"data: ", b"data:", b"data", b"event: e", b"id: 7", b"id: \0", b"retry: 9", b": c", b"x", b"\xe2\x80\x94", b"\xff", b"\xef\xbb\xbf", b"\n", b"\r", b"\r\n", b" "]),
    max_size=40,
).map(b"".join)


@given(st.data(), sse_soup)
def test_any_bytes_in_any_chunks_parse_as_the_standard_reads_them(data, body):
    """Whatever the bytes and wherever they are cut, the parser's events are the standard's
    (the common lines take a shorter road through the parser than the others: both must agree)."""
    chunks = cut(body, data.draw(sse_cuts(len(body))))
    assert parse(*chunks) == reference_parse(body)


def test_the_cap_counts_each_data_line_with_its_field_name_and_line_end():
    """A data line counts its bytes, "data: " included, and one for its line end: 100 bytes pass a
    cap of 100, 101 do not, whether the line has the space after the colon or not."""
    for first in (b"", b": a first line\n"):  # the first line of a stream takes the longer road (a BOM)
        assert parse(first + b"data: " + b"x" * 93 + b"\n\n", max_event_bytes=100) == [SSEEvent("message", "x" * 93)]
        with pytest.raises(SSEError, match="exceeds 100 bytes"):
            parse(first + b"data: " + b"x" * 94 + b"\n\n", max_event_bytes=100)
        assert parse(first + b"data:" + b"x" * 94 + b"\n\n", max_event_bytes=100) == [SSEEvent("message", "x" * 94)]
        with pytest.raises(SSEError, match="exceeds 100 bytes"):
            parse(first + b"data:" + b"x" * 95 + b"\n\n", max_event_bytes=100)


def test_a_bom_is_dropped_from_the_first_line_only():
    """The first line loses a leading BOM; a BOM that starts a later line is part of its field name
    (so "\\ufeffdata" is an unknown field, ignored)."""
    assert parse(b"\xef\xbb\xbfdata: a\n\n") == [SSEEvent("message", "a")]
    assert parse(b"data: a\n\xef\xbb\xbfdata: b\n\n") == [SSEEvent("message", "a")]


def test_invalid_utf8_in_a_data_line_becomes_replacement_characters_on_either_path():
    """Bytes that are not UTF-8 become U+FFFD, in a "data: " line (read in one step) as in a "data:" line (read by the standard's steps)."""
    assert [e.data for e in parse(b"data: ok\n\ndata: a\xff\xfeb\n\ndata:c\xffd\n\n")] == ["ok", "a\ufffd\ufffdb", "c\ufffdd"]


def test_an_event_of_many_data_lines_without_a_space_is_capped_on_their_sum():
    """The cap counts every "data:" line of the event, not the last one alone, also on the standard's path (no space after the colon)."""
    with pytest.raises(SSEError, match="exceeds 100 bytes"):
        parse(*[b"data:" + b"z" * 30 + b"\n"] * 5, max_event_bytes=100)
