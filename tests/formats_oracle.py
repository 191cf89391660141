"""Independent Python oracles for the dataset file formats: CRC32C, TFRecord framing
and tf.train.Example (with the real protobuf runtime and example.proto's schema), so
the C++ readers and writers are checked against code that shares nothing with them."""
import struct

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    _TABLE.append(_c)


def crc32c(data: bytes, crc: int = 0) -> int:
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ _TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", mask(crc32c(length))) + data +
            struct.pack("<I", mask(crc32c(data))))


def read_records(blob: bytes):
    """Records of a TFRecord byte string (asserts both CRCs)."""
    out, off = [], 0
    while off < len(blob):
        (n,) = struct.unpack_from("<Q", blob, off)
        (lcrc,) = struct.unpack_from("<I", blob, off + 8)
        assert lcrc == mask(crc32c(blob[off:off + 8]))
        data = blob[off + 12:off + 12 + n]
        (dcrc,) = struct.unpack_from("<I", blob, off + 12 + n)
        assert dcrc == mask(crc32c(data))
        out.append(data)
        off += 16 + n
    return out


def _example_classes():
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="podlet_test/example.proto", package="podlet_test",
                                             syntax="proto3")

    def msg(name, fields, nested=()):
        m = fdp.message_type.add(name=name)
        for fname, num, ftype, label, tname, oneof in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
            if oneof is not None:
                f.oneof_index = oneof
        return m

    R, O = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    msg("BytesList", [("value", 1, F.TYPE_BYTES, R, None, None)])
    msg("FloatList", [("value", 1, F.TYPE_FLOAT, R, None, None)])
    msg("Int64List", [("value", 1, F.TYPE_INT64, R, None, None)])
    feat = msg("Feature", [("bytes_list", 1, F.TYPE_MESSAGE, O, ".podlet_test.BytesList", 0),
                           ("float_list", 2, F.TYPE_MESSAGE, O, ".podlet_test.FloatList", 0),
                           ("int64_list", 3, F.TYPE_MESSAGE, O, ".podlet_test.Int64List", 0)])
    feat.oneof_decl.add(name="kind")
    feats = msg("Features", [("feature", 1, F.TYPE_MESSAGE, R, ".podlet_test.Features.FeatureEntry", None)])
    entry = feats.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=O)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=O, type_name=".podlet_test.Feature")
    msg("Example", [("features", 1, F.TYPE_MESSAGE, O, ".podlet_test.Features", None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"podlet_test.{n}"))
            for n in ("Example", "Feature")}


PB = _example_classes()


def example_bytes(features: dict) -> bytes:
    """{name: (kind, values)} -> serialised tf.train.Example via the protobuf runtime."""
    ex = PB["Example"]()
    for k, (kind, values) in features.items():
        getattr(ex.features.feature[k], kind).value.extend(values)
    return ex.SerializeToString()


def example_dict(data: bytes) -> dict:
    ex = PB["Example"]()
    ex.ParseFromString(data)
    out = {}
    for k, f in ex.features.feature.items():
        kind = f.WhichOneof("kind")
        out[k] = (kind or "none", list(getattr(f, kind).value) if kind else [])
    return out
