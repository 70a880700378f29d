"""The pure parts of yiemagent.mcp: tool names, secrets, and keeping the SDK out of ``import yiemagent``."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import pytest
from hypothesis import given

import mcp  # noqa: E402,F401  make test installs the mcp extra (Makefile): these tests run there, never skip

from strategies import mcp_prefixes, mcp_tool_names  # noqa: E402
from yiemagent.mcp._convert import agent_tool_names
from yiemagent._log_masking import install_log_filter, remove_log_filter
from yiemagent._secrets import Secrets

VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@given(mcp_tool_names, mcp_prefixes)
def test_every_mcp_name_gets_a_distinct_valid_tool_name(names, prefix):
    """Whatever names a server lists, each maps to its own name valid for LLM APIs, in listing order."""
    mapping = agent_tool_names(names, prefix)
    assert list(mapping.values()) == names
    assert all(VALID.match(name) for name in mapping)


def test_names_are_prefixed_and_cleaned():
    """The prefix joins with '_'; characters LLM APIs refuse become '_'; a clash gets a number."""
    assert agent_tool_names(["get_time", "fs/read.file", "fs_read_file"], "srv") == {
        "srv_get_time": "get_time",
        "srv_fs_read_file": "fs/read.file",
        "srv_fs_read_file_2": "fs_read_file",
    }
    assert agent_tool_names(["get_time"], None) == {"get_time": "get_time"}


def test_long_names_are_cut_and_stay_apart():
    """Two names over 64 characters that differ only at the end map to two different names."""
    a, b = "x" * 90 + "a", "x" * 90 + "b"
    mapping = agent_tool_names([a, b], None)
    assert len(mapping) == 2 and all(len(name) == 64 for name in mapping)


def test_mcp_secrets_hide_values_and_bearer_tokens_but_not_short_words():
    """Header and env values and the token of a 'Bearer <token>' value become ***; values under 6 characters stay."""
    secrets = Secrets(values={"Authorization": "Bearer tok-123456", "DEBUG": "1", "KEY": "abcdef"})
    assert secrets.redact("sent Bearer tok-123456, echoed tok-123456, key abcdef, level 1") == "sent ***, echoed ***, key ***, level 1"
    assert Secrets(values={"X": "12345"}).redact("12345") == "12345"
    assert Secrets(values={"Authorization": "Bearer x", "DEBUG": "1"}).masked_headers({"Authorization": "Bearer x", "DEBUG": "1"}) == {
        "Authorization": "***",
        "DEBUG": "***",
    }


def test_sdk_log_records_are_redacted_while_a_client_is_open(caplog):
    """A secret in a log record of the SDK's loggers is replaced while registered, and shown again after."""
    secrets = Secrets(values={"Authorization": "Bearer sdk-secret-42"})
    sdk_logger = logging.getLogger("mcp.client.streamable_http")
    with caplog.at_level(logging.DEBUG, logger="mcp"):
        install_log_filter(secrets)
        sdk_logger.debug("SSE message: %s", "token Bearer sdk-secret-42")
        remove_log_filter(secrets)
        sdk_logger.debug("after close: %s", "sdk-secret-42")
    assert [r.getMessage() for r in caplog.records] == ["SSE message: token ***", "after close: sdk-secret-42"]


def test_importing_yiemagent_does_not_import_the_sdk():
    """`import yiemagent` loads neither mcp nor anyio: the extra costs nothing unless used."""
    code = "import sys, yiemagent, yiemagent.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'anyio') or m.startswith('yiemagent.mcp')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "[]"


def test_without_the_extra_the_import_error_says_what_to_install():
    """Importing yiemagent.mcp without the SDK (or with SDK 1.x) raises ImportError naming the extra."""
    code = (
        "import importlib.metadata as md\n"
        "real = md.version\n"
        "def fake(name):\n"
        "    if name == 'mcp':\n"
        "        if FOUND is None: raise md.PackageNotFoundError(name)\n"
        "        return FOUND\n"
        "    return real(name)\n"
        "md.version = fake\n"
        "try:\n"
        "    import yiemagent.mcp\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    for found, expected in ((None, 'pip install "yiemagent[mcp]"'), ("'1.27.0'", "(found mcp 1.27.0)")):
        out = subprocess.run([sys.executable, "-c", f"FOUND = {found}\n{code}"], capture_output=True, text=True, timeout=60, check=True).stdout
        assert expected in out and "MCP Python SDK 2.x" in out
