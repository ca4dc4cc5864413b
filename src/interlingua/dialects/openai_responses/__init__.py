"""The OpenAI Responses API dialect (PROTOCOLS.md §3)."""
