"""The OpenAI Responses API dialect (``POST /v1/responses``, PROTOCOLS.md §3).

A pure codec, like :mod:`interlingua.dialects.openai_chat`: ``request`` (with ``_items``
and ``_render``) converts request bodies, ``errors`` error bodies, ``endpoint`` builds
the upstream URL; the dialect's name is ``_items.DIALECT_NAME`` (``"responses"``).
"""
