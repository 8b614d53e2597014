"""The clients llmtop measures through. Every engine yields the same time-stamped
`StreamEvent`s.

Ollama's API (`ollama`), OpenAI-compatible servers (`openai*`: llama-server, vLLM, LM Studio),
llmtop's relay (`relay`, the client side), with what they share: the `Engine` protocol
(`base`), events and failures (`events`, `http`), addresses (`hosts`), the connected engine
(`connection`). The wire stamping they use is `llmtop.stamping`; llmtop's own servers are
`llmtop.servers`. No Textual here: the TUI depends on engines, never the reverse.
"""
