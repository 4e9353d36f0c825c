"""The tool-aware chat template written into converted SmolLM2 checkpoints.

The GGUF file ships SmolLM2's plain ChatML template, which ignores ``tools`` and cannot render
assistant tool calls or tool results. We replace it with a superset: without tools and without
tool messages it renders byte-for-byte what the original renders (tested against the GGUF's own
template), and with tools it follows the Hermes/Qwen convention that open tool-use data uses:

* tool schemas go into the system turn inside ``<tools></tools>``;
* an assistant tool call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
* a ``tool`` message is rendered as a user turn wrapped in ``<tool_response></tool_response>``.

``TOOL_CALL_OPEN``/``TOOL_CALL_CLOSE`` are the markers the inference bridge and the server parse.
"""

from __future__ import annotations

DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

# Whitespace control ({%- / {{-) keeps the template's own layout out of the rendered text, so
# every newline in the output comes from an explicit string literal below.
TOOL_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0]['role'] == 'system' %}{{- messages[0]['content'] or '' }}"
    "{%- else %}{{- '" + DEFAULT_SYSTEM_PROMPT + "' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif not messages or messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if loop.first and tools and message['role'] == 'system' %}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + (message['content'] or '') + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if message['content'] %}{{- message['content'] + '\\n' }}{%- endif %}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set fn = call['function'] if call['function'] is defined else call %}"
    "{%- if not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' }}"
    "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
