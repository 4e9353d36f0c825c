"""knowlyr-recorder: real agent logs into standard knowlyr trajectories.

Adapters turn OpenHands, SWE-agent, mini-swe-agent, OpenAI tool-call chats (tau-bench,
SWE-Gym), ShareGPT and Who&When logs, the ATIF and ADP standards and the nebius data set into
core ``Trajectory`` records; ``to_atif`` / ``to_adp`` write the standards back (lossless
round trip), ``validate_atif`` checks ATIF's required fields; ``Recorder`` records live
agents into the same schema.

Example:
    >>> from agentrecorder import names
    >>> "openhands" in names()
    True
"""

from agentrecorder._siblings import __version__ as __version__  # first: knowlyr-core must be ours
from agentrecorder.adapters.base import RESPOND, Adapter, StepList
from agentrecorder.atif_validation import check_atif_file, validate_atif
from agentrecorder.convert import (
    BatchReport,
    FileResult,
    convert_file,
    convert_paths,
    convert_record,
    expand_inputs,
    iter_convert,
    load_trajectories,
)
from agentrecorder.detect import Detection, detect
from agentrecorder.errors import ConversionError, FieldError, UnknownFormatError
from agentrecorder.interop import export_file, to_adp, to_atif
from agentrecorder.loading import load_records
from agentrecorder.recorder import Episode, Recorder
from agentrecorder.registry import ENTRY_POINT_GROUP, adapters, get_adapter, names, register_adapter
from agentrecorder.show import render
from agentrecorder.stats import format_summary, summarize
from agentrecorder.view import render_html

__all__ = [
    # conversion
    "BatchReport",
    "FileResult",
    "convert_file",
    "convert_paths",
    "convert_record",
    "expand_inputs",
    "iter_convert",
    "load_records",
    "load_trajectories",
    # interchange standards (ATIF, ADP)
    "check_atif_file",
    "export_file",
    "to_adp",
    "to_atif",
    "validate_atif",
    # adapters, registry and detection
    "ENTRY_POINT_GROUP",
    "RESPOND",
    "Adapter",
    "Detection",
    "StepList",
    "adapters",
    "detect",
    "get_adapter",
    "names",
    "register_adapter",
    # errors
    "ConversionError",
    "FieldError",
    "UnknownFormatError",
    # live recording
    "Episode",
    "Recorder",
    # inspection
    "format_summary",
    "render",
    "render_html",
    "summarize",
]
