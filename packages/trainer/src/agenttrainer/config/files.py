"""Reading a config file, and the error every config raises.

A config file may be any file the caller names (an MCP client, a typo): its errors name the file,
the line and what is wrong, and never echo the file's text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agenttrainer.errors import TrainerError
from knowlyrcore.errors import describe_parse_error, no_such_file

MAX_CONFIG_BYTES = 1 << 20


class ConfigError(TrainerError, ValueError):
    """An invalid configuration value or file."""

    exit_code = 2  # wrong input: the command exits 2 (knowlyrcore.clikit)


def read_config_file(path: str | Path) -> tuple[dict[str, Any], dict[str, int]]:
    """The mapping in the YAML file ``path`` and the line of each top-level key.

    Errors name the file and line, never the file's content."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: cannot read config (larger than {MAX_CONFIG_BYTES} bytes)")
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(no_such_file(path)) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: cannot read config (not UTF-8 text)") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        loaded = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        line, problem = describe_parse_error(exc)
        where = f"{path}:{line}" if line else str(path)
        raise ConfigError(f"{where}: not valid YAML ({problem})") from None
    except (yaml.YAMLError, RecursionError):
        raise ConfigError(f"{path}: not valid YAML") from None
    finally:
        loader.dispose()
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of config fields")
    lines = {}
    if isinstance(node, yaml.MappingNode):
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                lines.setdefault(key.value, key.start_mark.line + 1)
    return dict(loaded or {}), lines
