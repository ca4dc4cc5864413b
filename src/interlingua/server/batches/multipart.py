"""A ``multipart/form-data`` body read as it arrives: small fields kept, the file passed on.

Starlette's ``request.form()`` reads the whole body before it returns: it spools a file
part to a temporary file past 1 MB (so memory stays bounded), but the upload is then
written twice (temporary file, then the store), and a body over the limit is only found
out once all of it has been received. :class:`FormReader` runs python-multipart's
streaming parser itself: each piece of the body is fed in as the server receives it, the
file part's bytes come out at once (:meth:`FormReader.take`) for the caller to write to
the store, and the caller checks the size as they come, so an upload over the limit is
refused when it passes the limit. What it holds is one received piece of the body and
the small fields (at most :data:`MAX_FIELD_BYTES` together).
"""

from __future__ import annotations

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from ...errors import InvalidRequestError

__all__ = ["MAX_FIELD_BYTES", "FormReader", "boundary_of"]

#: bytes of all the fields but the file together (names, values): the API's are a few
#: words (``purpose``, ``expires_after[...]``)
MAX_FIELD_BYTES = 64 * 1024


def _bad(message: str, param: str | None = None) -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code="invalid_request")


def boundary_of(content_type: str) -> bytes:
    """The boundary of a ``multipart/form-data`` Content-Type; a 400 for any other."""
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise _bad(
            "Expected a multipart/form-data body (fields 'file' and 'purpose'), "
            f"got Content-Type {content_type or 'none'!r}."
        )
    return boundary


class FormReader:
    """Feed the body's pieces (:meth:`feed`), take the file's bytes out after each
    (:meth:`take`), :meth:`finish` at the end. ``file_field`` names the file part."""

    def __init__(self, boundary: bytes, file_field: str = "file") -> None:
        self.file_field = file_field
        #: the small fields, by name (the last of a repeated one)
        self.fields: dict[str, str] = {}
        #: the file part's filename once its headers are in (None: not yet)
        self.filename: str | None = None
        self._field_bytes = 0
        self._header_field = bytearray()
        self._header_value = bytearray()
        self._name: str | None = None
        self._part_filename: str | None = None
        self._in_file = False
        self._value = bytearray()
        self._pending: list[bytes] = []
        self._ended = False
        self._parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._part_begin,
                "on_header_field": self._header_field_data,
                "on_header_value": self._header_value_data,
                "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished,
                "on_part_data": self._part_data,
                "on_part_end": self._part_end,
                "on_end": self._end,
            },
        )

    def feed(self, data: bytes) -> None:
        """Parse one piece of the body; a 400 when it is not a valid form."""
        try:
            self._parser.write(data)
        except MultipartParseError as exc:
            raise _bad(f"The multipart/form-data body is malformed: {exc}") from None

    def take(self) -> list[bytes]:
        """The file bytes parsed since the last call."""
        pending, self._pending = self._pending, []
        return pending

    def finish(self) -> None:
        """The body has ended: a 400 when the form had not."""
        self._parser.finalize()
        if not self._ended:
            raise _bad("The multipart/form-data body ended before its closing boundary.")

    # -- the parser's callbacks -----------------------------------------------------------

    def _part_begin(self) -> None:
        self._name, self._part_filename, self._in_file = None, None, False
        self._value.clear()

    def _header_field_data(self, data: bytes, start: int, end: int) -> None:
        self._header_field += data[start:end]

    def _header_value_data(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        if bytes(self._header_field).lower() == b"content-disposition":
            _, options = parse_options_header(bytes(self._header_value))
            name = options.get(b"name")
            self._name = name.decode("utf-8", "replace") if name is not None else None
            filename = options.get(b"filename")
            if filename is not None:
                self._part_filename = filename.decode("utf-8", "replace")
        self._header_field.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        if self._name == self.file_field:
            if self.filename is not None:
                raise _bad(f"The form has more than one '{self.file_field}' part.", self.file_field)
            self.filename = self._part_filename or self.file_field
            self._in_file = True

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._in_file:
            self._pending.append(data[start:end])
            return
        self._field_bytes += end - start
        if self._field_bytes > MAX_FIELD_BYTES:
            raise _bad(
                f"The form's fields besides '{self.file_field}' exceed {MAX_FIELD_BYTES} bytes."
            )
        self._value += data[start:end]

    def _part_end(self) -> None:
        if not self._in_file and self._name is not None:
            self.fields[self._name] = self._value.decode("utf-8", "replace")
        self._in_file = False

    def _end(self) -> None:
        self._ended = True
