"""The OpenAI Responses API dialect (``POST /v1/responses``, PROTOCOLS.md §3).

Pure codecs, like :mod:`interlingua.dialects.openai_chat`: ``request`` (with ``_items``,
``_render`` and ``_tools``) converts request bodies both ways, ``response`` response
objects, ``stream`` the event stream (its decoder in ``_decoder``), ``errors`` error
bodies, and ``endpoint`` builds the upstream URL. The dialect's name is ``"responses"``.
Not yet registered with :func:`interlingua.dialects.get_dialect` nor served (issue 10).
"""
