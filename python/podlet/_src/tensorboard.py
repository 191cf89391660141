"""flax.metrics.tensorboard without TensorFlow: a SummaryWriter that writes TensorBoard
event files (TFRecord framing with masked CRC32C, Event / Summary protobufs encoded by
hand), reachable as ``podlet.metrics.tensorboard``.

Scalars, text and hparams (as a text summary named ``hparams``, a Markdown table) are
written; TensorBoard reads them as it reads flax's."""
import os
import socket
import struct
import time

import numpy as np

from .. import _core


def _varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, wire, payload):
    key = _varint((num << 3) | wire)
    if wire == 2:
        return key + _varint(len(payload)) + payload
    return key + payload


def _string(num, s):
    return _field(num, 2, s.encode() if isinstance(s, str) else s)


def _event(step, summary=None, file_version=None):
    e = _field(1, 1, struct.pack("<d", time.time())) + _field(2, 0, _varint(int(step)))
    if file_version is not None:
        e += _string(3, file_version)
    if summary is not None:
        e += _field(5, 2, summary)
    return e


def _text_value(tag, text):
    # TensorProto {dtype: DT_STRING (7), tensor_shape: {}, string_val: [text]}
    tensor = _field(1, 0, _varint(7)) + _field(2, 2, b"") + _string(8, text)
    metadata = _field(1, 2, _string(1, "text"))  # SummaryMetadata.plugin_data.plugin_name
    return _string(1, tag) + _field(9, 2, metadata) + _field(8, 2, tensor)


class SummaryWriter:
    """flax.metrics.tensorboard.SummaryWriter: log_dir gets one events file."""

    def __init__(self, log_dir, auto_flush=True):
        os.makedirs(log_dir, exist_ok=True)
        self._path = os.path.join(log_dir, f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}")
        self._file = open(self._path, "ab")
        self._auto_flush = auto_flush
        self._closed = False
        self._write(_event(0, file_version="brain.Event:2"))

    def _write(self, data):
        if self._closed:
            raise ValueError(f"SummaryWriter for {self._path} is closed")
        header = struct.pack("<Q", len(data))
        self._file.write(header + struct.pack("<I", _core.mask_crc(_core.crc32c(header)))
                         + data + struct.pack("<I", _core.mask_crc(_core.crc32c(data))))
        if self._auto_flush:
            self._file.flush()

    def scalar(self, tag, value, step):
        """A scalar summary (simple_value, float32) at `step`."""
        value = float(np.asarray(value))
        self._write(_event(step, summary=_field(1, 2, _string(1, tag) + _field(2, 5, struct.pack("<f", value)))))

    def text(self, tag, textdata, step):
        """A text summary (TensorBoard's text plugin) at `step`."""
        if not isinstance(textdata, (str, bytes)):
            raise ValueError(f"`textdata` should be of the type `str` or `bytes`, got {type(textdata).__name__}")
        self._write(_event(step, summary=_field(1, 2, _text_value(tag, textdata))))

    def write_scalars(self, step, scalars):
        for k, v in scalars.items():
            self.scalar(k, v, step)

    def hparams(self, hparams):
        """The hyperparameters as a Markdown table in a text summary named 'hparams' (step 0);
        nested dicts are flattened with '.' as flax does."""
        flat = {}

        def walk(d, prefix):
            for k, v in d.items():
                if isinstance(v, dict):
                    walk(v, f"{prefix}{k}.")
                else:
                    flat[f"{prefix}{k}"] = v

        walk(dict(hparams), "")
        rows = "\n".join(f"| {k} | {v} |" for k, v in sorted(flat.items()))
        self.text("hparams", "| name | value |\n| --- | --- |\n" + rows, 0)

    def flush(self):
        if not self._closed:
            self._file.flush()

    def close(self):
        if not self._closed:
            self._file.close()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
