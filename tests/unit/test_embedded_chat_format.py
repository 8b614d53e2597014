"""The embedded engine's chat prompt keeps a system message, as Ollama does.

llama-cpp-python's gemma format drops every system message; Ollama's gemma3 template renders
each one as a user turn (`{{ if or (eq .Role "user") (eq .Role "system") }}<start_of_turn>user`).
(A model served "raw", with no template, drops it, as Ollama's default `{{ .Prompt }}` does.)
"""

from __future__ import annotations

from llmtop.servers.embedded.llama_backend import LlamaBackend
from llmtop.servers.embedded.model_files import bundled_model_path


def test_a_system_message_is_rendered_as_a_user_turn_before_the_users():
    backend = LlamaBackend(str(bundled_model_path()), chat_format="gemma")
    prompt, stops = backend.chat_prompt([
        {"role": "system", "content": "quartz lantern meadow"},
        {"role": "user", "content": "Why is the sky blue?"},
    ])
    # Ollama's gemma3 template for these two messages, by hand:
    assert prompt.endswith(
        "<start_of_turn>user\nquartz lantern meadow<end_of_turn>\n"
        "<start_of_turn>user\nWhy is the sky blue?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    assert stops == ("<end_of_turn>\n",)  # llama-cpp-python's gemma stop, kept


def test_two_prompts_that_differ_only_in_the_system_message_differ_from_their_start():
    backend = LlamaBackend(str(bundled_model_path()), chat_format="gemma")
    user = {"role": "user", "content": "Why is the sky blue?"}
    a = backend.tokenize(backend.chat_prompt([{"role": "system", "content": "amber"}, user])[0])
    b = backend.tokenize(backend.chat_prompt([{"role": "system", "content": "cobalt"}, user])[0])
    shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    # BOS, <start_of_turn>, "user", "\n": the template's 4 tokens, then the system words differ
    assert shared <= 4
