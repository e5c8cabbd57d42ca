"""A tiny protobuf encoder/decoder for the integration tests: enough of fleetprof.proto's
wire format (varints and length-delimited fields) to play a child or a tool that behaves in
exactly the way a test needs, including badly."""
import socket


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, value):
    if isinstance(value, (bytes, str)):
        value = value.encode() if isinstance(value, str) else value
        return varint(num << 3 | 2) + varint(len(value)) + value
    return varint(num << 3) + varint(value)


def frame(env_field, *fields):
    body = field(env_field, b"".join(fields))
    return varint(len(body)) + body


def read_varint(buf, i):
    """Decodes the varint at buf[i]; returns (value, index after it), or (None, i) if buf
    ends first."""
    value, shift, j = 0, 0, i
    while j < len(buf):
        value |= (buf[j] & 0x7F) << shift
        shift += 7
        j += 1
        if not buf[j - 1] & 0x80:
            return value, j
    return None, i


def parse_fields(body):
    """{field number: [values]} of a message: ints for varints, bytes for the rest."""
    out, i = {}, 0
    while i < len(body):
        key, i = read_varint(body, i)
        num, wire = key >> 3, key & 7
        value, i = read_varint(body, i)
        if wire != 0:
            value, i = body[i:i + value], i + value
        out.setdefault(num, []).append(value)
    return out


def parse(body):
    """An Envelope: (the oneof's field number, its message's fields)."""
    (num, sub), = parse_fields(body).items()
    return num, parse_fields(sub[0])


def split_frames(buf):
    """The whole frames at the start of buf, parsed, and the bytes after them."""
    frames = []
    while True:
        n, i = read_varint(buf, 0)
        if n is None or len(buf) - i < n:
            return frames, buf
        body, buf = buf[i:i + n], buf[i + n:]
        frames.append(parse(body))


def read_frames(sock, timeout=5):
    """Yields (envelope field number, {field: [values]}) for frames read until timeout."""
    sock.settimeout(timeout)
    buf = b""
    while True:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            return
        if not data:
            return
        frames, buf = split_frames(buf + data)
        yield from frames


CAPTURE_REQUEST, CAPTURE_RESULT, ERROR = 30, 35, 18


def capture(sock_path, output_path, timeout=60):
    """Asks the daemon for a capture; returns (result fields, error fields) as dicts."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    try:
        s.sendall(frame(CAPTURE_REQUEST, field(1, 1), field(2, output_path)))
        for num, msg in read_frames(s, timeout=timeout):
            if num == CAPTURE_RESULT:
                return msg, None
            if num == ERROR:
                return None, msg
    finally:
        s.close()
    raise AssertionError("no capture result from the daemon")


def capture_ok(sock_path, output_path, timeout=60):
    """A capture that must succeed: fails naming the daemon's Error, or the error its
    CaptureResult carries (field 5: the file was not written), else returns the result."""
    result, error = capture(sock_path, output_path, timeout)
    assert error is None, f"capture refused: {error}"
    assert not result.get(5), f"capture failed: {result[5][0].decode(errors='replace')}"
    return result
