"""``getTime``: the current time, optionally in an IANA time zone (spec §1 Step 2, §17).

Follows the tool file contract: ``get_time_prepare_arguments`` (optional hook),
``get_time_execute``, and the factory ``get_time_tool``.
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timezone
from typing import Any, Optional

from ..types import AbortSignal, AgentTool, AgentToolResult, TextContent
from ..errors import ToolError

__all__ = ["get_time_execute", "get_time_prepare_arguments", "get_time_tool"]

INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "timezone": {
            "type": "string",
            "description": "IANA time zone name such as 'Asia/Tokyo' or 'Europe/Paris'. Leave out for the machine's local time.",
        }
    },
}


def get_time_prepare_arguments(args: dict[str, Any]) -> dict[str, Any]:
    """Trim the zone name, and treat an empty one as "no zone given" (local time)."""
    zone = args.get("timezone")
    if isinstance(zone, str):
        zone = zone.strip()
        if not zone:
            return {k: v for k, v in args.items() if k != "timezone"}
        return {**args, "timezone": zone}
    return args


def _utc_offset(moment: datetime) -> str:
    offset = moment.utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    sign = "+" if minutes >= 0 else "-"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def get_time_execute(
    tool_call_id: str, args: dict[str, Any], signal: Optional[AbortSignal], on_partial_result: Any
) -> AgentToolResult:
    """The current time in ``args["timezone"]``, or the machine's local time when none is given.

    Raises:
        ToolError: the zone is unknown or malformed (the message names it); the pipeline
            turns it into an error result for the model.
    """
    zone_name = args.get("timezone")
    if zone_name is None:
        now = datetime.now(timezone.utc).astimezone()
        label = "Current local time"
    else:
        try:
            zone = zoneinfo.ZoneInfo(zone_name)
        except zoneinfo.ZoneInfoNotFoundError as exc:
            if not zoneinfo.available_timezones():
                raise ToolError(
                    "No IANA time zone database is installed on this machine (install the 'tzdata' package); "
                    "call getTime without a timezone for local time"
                ) from exc
            raise ToolError(
                f"Time zone {zone_name!r} was not found in the IANA time zone database. "
                "Use a name such as 'Asia/Tokyo', 'Europe/Paris' or 'America/New_York'"
            ) from exc
        except ValueError as exc:
            raise ToolError(f"Time zone {zone_name!r} is not a valid IANA time zone name (like 'Asia/Tokyo')") from exc
        now = datetime.now(zone)
        label = f"Current time in {zone_name}"
    text = f"{label}: {now:%Y-%m-%d %H:%M:%S} {now.tzname() or ''} ({_utc_offset(now)})".replace("  ", " ")
    details = {"iso": now.isoformat(), "timezone": zone_name, "utc_offset": _utc_offset(now), "unix": now.timestamp()}
    return AgentToolResult([TextContent(text)], details)


def get_time_tool() -> AgentTool:
    """The ``getTime`` tool (spec §1 Step 2 ``getTimeTool()``)."""
    return AgentTool(
        name="getTime",
        label="Time Lookup",
        description="Get the current local time, or the current time in an IANA time zone such as 'Asia/Tokyo'.",
        input_schema=INPUT_SCHEMA,
        execute=get_time_execute,
        prepare_arguments=get_time_prepare_arguments,
        parallel_tool_execute=True,
    )
