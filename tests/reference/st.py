"""Tiny safetensors reader/writer in numpy (no dependency on the `safetensors` package).

File layout:
  8 bytes   little-endian uint64 N = length of the JSON header
  N bytes   JSON: {name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
                   "__metadata__": {"format": "pt"}}
            (we pad it with spaces so the data starts at a multiple of 8)
  rest      raw little-endian tensor data; data_offsets are relative to the start of it.
"""
import json
import struct

import numpy as np

# safetensors dtype name -> numpy little-endian dtype (BF16 has no numpy dtype: read as raw uint16)
_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2",
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
}
_NP_TO_ST = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32", np.dtype("<f2"): "F16",
             np.dtype("<i8"): "I64", np.dtype("<i4"): "I32", np.dtype("<i2"): "I16",
             np.dtype("i1"): "I8", np.dtype("<u8"): "U64", np.dtype("<u4"): "U32",
             np.dtype("<u2"): "U16", np.dtype("u1"): "U8", np.dtype("?"): "BOOL"}


def bf16_to_f32(raw_u16):
    """bfloat16 bits are the top 16 bits of a float32."""
    return (raw_u16.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (NaN kept NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    rounded[nan] = 0x7FC0
    return rounded


def read_header(path):
    """Return (header dict without __metadata__, metadata dict, data start offset)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    meta = header.pop("__metadata__", {})
    return header, meta, 8 + n


def load(path, to_f32=False):
    """Read a safetensors file -> dict name -> numpy array (in file order).

    F16 is returned as float16 and BF16 as float32 (numpy has no bfloat16);
    with to_f32=True every floating tensor is converted to float32.
    """
    header, _meta, start = read_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    out = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        dt = info["dtype"]
        if dt not in _DTYPES:
            raise ValueError(f"{path}: {name}: unsupported dtype {dt}")
        b, e = info["data_offsets"]
        shape = tuple(info["shape"])
        arr = np.frombuffer(data[b:e], dtype=_DTYPES[dt])
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: {name}: {e - b} bytes do not fit shape {shape} {dt}")
        arr = arr.reshape(shape)
        if dt == "BF16":
            arr = bf16_to_f32(arr)
        elif to_f32 and dt in ("F16", "F64"):
            arr = arr.astype(np.float32)
        out[name] = arr.copy()  # writable, detached from the file buffer
    return out


def save(path, tensors, dtype=None, metadata=None):
    """Write dict name -> numpy array. dtype: None (keep each array's dtype), "F32", "F16" or "BF16"."""
    meta = {"format": "pt"}
    if metadata:
        meta.update({str(k): str(v) for k, v in metadata.items()})
    header = {"__metadata__": meta}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if dtype == "BF16":
            st_dt, raw = "BF16", f32_to_bf16_bits(a.astype(np.float32))
        elif dtype is not None:
            st_dt = dtype
            raw = np.ascontiguousarray(a, dtype=_DTYPES[dtype])
        else:
            raw = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
            st_dt = _NP_TO_ST[raw.dtype]
        b = raw.tobytes()
        header[name] = {"dtype": st_dt, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-(8 + len(hjson))) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
