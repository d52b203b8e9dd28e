# SPDX-License-Identifier: Apache-2.0
"""humming_moe: the humming-moe engine from Python through ctypes, with no build step.

An embedding host (a serving stack on torch) makes an Engine on the GPU torch uses,
a MoeLayer from a config dict or a model preset, loads weights from its own tensors
(on the host or already on the device), and runs forward on torch's current stream:

    eng = humming_moe.Engine(device=torch.cuda.current_device())
    layer = humming_moe.MoeLayer(eng, {"model": "deepseek-v3", "scheme": "w4a16"})
    layer.load({"qweight": qw1, "scales": s1, "zeros": z1}, {"qweight": qw2, ...})
    layer.load_shared(shared_gate_up, shared_down)  # the same dicts, one expert
    layer.set_router_bias(bias)
    layer.transform()
    layer.forward(x, y, router_logits=logits)

Tensors are contiguous objects with data_ptr() (torch tensors), or ctypes arrays for host
memory. Pointers cross as they are: nothing is copied or synchronized on the host, so a
tensor given to forward must live until the stream passes it (torch's caching allocator
sees to that for tensors used on their own stream). Sizes, dtypes and devices are
checked against the layer before any call. libhumming.so is found through
HUMMING_LIBHUMMING, else beside this file, in ../.. (installed under lib/humming-moe/python)
or in ../build (the source tree). A failed call
raises humming_moe.Error with the status and the library's hm_last_error() message.
"""
import ctypes
import os
import sys
import weakref

__all__ = ["Engine", "MoeLayer", "Error", "moe_config", "nccl_unique_id", "version", "shutdown"]

# ---- The library ----


def _library_path():
    env = os.environ.get("HUMMING_LIBHUMMING")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for rel in (".", "../..", "../build"):
        path = os.path.normpath(os.path.join(here, rel, "libhumming.so"))
        if os.path.exists(path):
            return path
    raise ImportError("humming_moe: libhumming.so not found; set HUMMING_LIBHUMMING to its path")


_path = _library_path()
_lib = ctypes.CDLL(_path)

# ---- Mirrors of the public structs (include/humming/*.h), checked against the library ----

_c_int64, _c_int, _c_bool, _c_float, _c_size, _c_vp = (ctypes.c_int64, ctypes.c_int, ctypes.c_bool, ctypes.c_float,
                                                       ctypes.c_size_t, ctypes.c_void_p)
ENGINE_CONFIG_MAGIC = 0x686D6563
MOE_CONFIG_MAGIC = 0x686D6D63
MOE_STAGE_COUNT = 8


class EngineConfig(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("magic", ctypes.c_uint32), ("backend", _c_int), ("device", _c_int),
                ("rank", _c_int), ("local_rank", _c_int)]


class QuantFormat(ctypes.Structure):
    _fields_ = [("weight", _c_int), ("scale", _c_int), ("scale_kind", _c_int), ("group_k", _c_int),
                ("group_n", _c_int), ("zero_point", _c_bool), ("global_scale", _c_bool)]


class QuantScheme(ctypes.Structure):
    _fields_ = [("weight", QuantFormat), ("act", _c_int), ("act_scale", _c_int)]


class RouterConfig(ctypes.Structure):
    _fields_ = [("scoring", _c_int), ("experts", _c_int64), ("top_k", _c_int), ("groups", _c_int),
                ("topk_group", _c_int), ("correction_bias", _c_bool), ("renormalize", _c_bool), ("scaling", _c_float)]


class MoeConfig(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("magic", ctypes.c_uint32), ("hidden", _c_int64),
                ("intermediate", _c_int64), ("router", RouterConfig), ("activation", _c_int), ("scheme", QuantScheme),
                ("layout", _c_int), ("shared_experts", _c_int64), ("shared_intermediate", _c_int64)]


class WeightsView(ctypes.Structure):
    _fields_ = [("qweight", _c_vp), ("scales", _c_vp), ("zeros", _c_vp), ("global_scale", _c_vp), ("bias", _c_vp)]


class WeightsBytes(ctypes.Structure):
    _fields_ = [("qweight", _c_size), ("scales", _c_size), ("zeros", _c_size), ("global_scale", _c_size),
                ("bias", _c_size)]


class MoeForwardArgs(ctypes.Structure):
    _fields_ = [("tokens", _c_int64), ("x", _c_vp), ("router_logits", _c_vp), ("topk_ids", _c_vp),
                ("topk_weights", _c_vp), ("y", _c_vp)]


class MoeStats(ctypes.Structure):
    _fields_ = [("layout", _c_int), ("tokens", _c_int64), ("launches", _c_int), ("timed", _c_bool),
                ("stage_us", _c_float * MOE_STAGE_COUNT), ("total_us", _c_float)]


class NcclId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


_MIRRORS = {"hm_engine_config": EngineConfig, "hm_quant_format": QuantFormat, "hm_quant_scheme": QuantScheme,
            "hm_moe_router_config": RouterConfig, "hm_moe_config": MoeConfig, "hm_weights_view": WeightsView,
            "hm_weights_bytes": WeightsBytes, "hm_moe_forward_args": MoeForwardArgs, "hm_moe_stats": MoeStats,
            "hm_comm_nccl_id": NcclId}

# Enums, in the order of their C tables.
STATUS_NAMES = ["OK", "INVALID_ARGUMENT", "UNSUPPORTED", "OUT_OF_MEMORY", "NOT_READY", "NO_DEVICE", "CUDA", "NVRTC",
                "NCCL", "MPI", "SYSTEM", "CORRUPT", "TIMEOUT", "REMOTE", "INTERNAL"]
BACKENDS = {"auto": 0, "host": 1, "cuda": 2}
SCORINGS = {"softmax": 0, "sigmoid": 1}
ACTIVATIONS = {"silu_mul": 0, "gelu_mul": 1, "relu2": 2}
LAYOUTS = {"auto": 0, "indexed": 1, "contiguous": 2, "masked": 3}

# ---- Prototypes ----

_P = ctypes.POINTER


def _proto(name, restype, *argtypes):
    fn = getattr(_lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


_proto("hm_get_version", ctypes.c_char_p)
_proto("hm_status_str", ctypes.c_char_p, _c_int)
_proto("hm_last_error", ctypes.c_char_p)
_proto("hm_abi_sizeof", _c_size, ctypes.c_char_p)
_proto("hm_dtype_name", ctypes.c_char_p, _c_int)
_proto("hm_shutdown", None)
_proto("hm_engine_create", _c_int, _P(EngineConfig), _P(_c_vp))
_proto("hm_engine_destroy", None, _c_vp)
_proto("hm_engine_backend", _c_int, _c_vp)
_proto("hm_engine_device_name", ctypes.c_char_p, _c_vp)
_proto("hm_engine_arch", _c_int, _c_vp)
_proto("hm_engine_device", _c_int, _c_vp)
_proto("hm_stream_wrap", _c_int, _c_vp, _c_vp, _P(_c_vp))
_proto("hm_stream_synchronize", _c_int, _c_vp)
_proto("hm_stream_destroy", None, _c_vp)
_proto("hm_quant_scheme_parse", _c_int, ctypes.c_char_p, _P(QuantScheme))
_proto("hm_moe_config_for_model", _c_int, ctypes.c_char_p, _P(MoeConfig))
_proto("hm_moe_layout_name", ctypes.c_char_p, _c_int)
_proto("hm_moe_layer_create", _c_int, _c_vp, _P(MoeConfig), _P(_c_vp))
_proto("hm_moe_layer_destroy", None, _c_vp)
_proto("hm_moe_layer_weights_bytes", _c_int, _c_vp, _c_bool, _P(WeightsBytes), _P(WeightsBytes))
for _name in ("hm_moe_layer_quantize", "hm_moe_layer_quantize_shared"):
    _proto(_name, _c_int, _c_vp, _c_vp, _c_vp)
for _name in ("hm_moe_layer_load", "hm_moe_layer_load_shared"):
    _proto(_name, _c_int, _c_vp, _P(WeightsView), _P(WeightsView))
for _name in ("hm_moe_layer_load_device", "hm_moe_layer_load_shared_device"):
    _proto(_name, _c_int, _c_vp, _P(WeightsView), _P(WeightsView), _c_vp)
_proto("hm_moe_layer_set_router_bias", _c_int, _c_vp, _c_vp)
_proto("hm_moe_layer_set_router_bias_device", _c_int, _c_vp, _c_vp, _c_vp)
_proto("hm_moe_layer_transform", _c_int, _c_vp, _c_vp)
_proto("hm_moe_layer_reserve", _c_int, _c_vp, _c_int64, _c_vp)
_proto("hm_moe_layer_forward", _c_int, _c_vp, _P(MoeForwardArgs), _c_vp)
_proto("hm_moe_layer_stats", _c_int, _c_vp, _P(MoeStats))
_proto("hm_comm_nccl_id_create", _c_int, _P(NcclId))

for _name, _cls in _MIRRORS.items():
    _c_size_of = _lib.hm_abi_sizeof(_name.encode())
    if _c_size_of != ctypes.sizeof(_cls):
        raise ImportError(f"humming_moe: {_name} is {ctypes.sizeof(_cls)} bytes in this module but {_c_size_of} "
                          f"in {_path}: the module and the library are from different versions")

# ---- Errors ----


class Error(RuntimeError):
    """A failed library call: status (int), status_name ("INVALID_ARGUMENT"), message."""

    def __init__(self, call, status):
        self.status = status
        self.status_name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
        self.message = _lib.hm_last_error().decode(errors="replace")
        super().__init__(f"{call}: {_lib.hm_status_str(status).decode()} ({self.status_name}): {self.message}")


def _check(call, status):
    if status != 0:
        raise Error(call, status)


def version():
    return _lib.hm_get_version().decode()


def shutdown():
    """Frees the library's process-wide registry; call after every Engine and MoeLayer is closed."""
    _lib.hm_shutdown()


def nccl_unique_id():
    """A fresh NCCL unique id (128 bytes) for hm_comm_create_nccl, made on one rank and sent to the others."""
    nid = NcclId()
    _check("hm_comm_nccl_id_create", _lib.hm_comm_nccl_id_create(ctypes.byref(nid)))
    return ctypes.string_at(ctypes.addressof(nid), ctypes.sizeof(nid))

# ---- Tensors: pointer, bytes, dtype and device of torch tensors and ctypes arrays ----


_TORCH_DTYPES = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16", "torch.int32": "i32",
                 "torch.uint32": "i32", "torch.int8": "i8", "torch.uint8": "u8", "torch.int16": "16bit",
                 "torch.uint16": "16bit", "torch.float8_e4m3fn": "f8e4m3", "torch.float8_e8m0fnu": "e8m0"}
_CTYPES_DTYPES = {ctypes.c_float: "f32", ctypes.c_int32: "i32", ctypes.c_uint32: "i32", ctypes.c_uint16: "16bit",
                  ctypes.c_int16: "16bit", ctypes.c_uint8: "u8", ctypes.c_int8: "i8"}
# The element types a tensor may have to stand for a library dtype (raw storage included).
_ACCEPTS = {"f32": {"f32"}, "i32": {"i32"}, "bf16": {"bf16", "16bit"}, "f16": {"f16", "16bit"},
            "e8m0": {"e8m0", "u8"}, "f8e4m3": {"f8e4m3", "u8"}}


class _Tensor:
    __slots__ = ("name", "ptr", "nbytes", "dtype", "device")

    def __init__(self, obj, name):
        self.name = name
        if isinstance(obj, ctypes.Array):
            self.ptr, self.nbytes, self.device = ctypes.addressof(obj), ctypes.sizeof(obj), None
            self.dtype = _CTYPES_DTYPES.get(obj._type_, "unknown")
        elif hasattr(obj, "data_ptr") and hasattr(obj, "numel") and hasattr(obj, "element_size"):
            if hasattr(obj, "is_contiguous") and not obj.is_contiguous():
                raise ValueError(f"{name}: the tensor must be contiguous")
            self.ptr, self.nbytes = obj.data_ptr(), obj.numel() * obj.element_size()
            self.dtype = _TORCH_DTYPES.get(str(obj.dtype), str(obj.dtype))
            dev = obj.device
            self.device = None if dev.type == "cpu" else (dev.index if dev.type == "cuda" else dev.type)
        else:
            raise TypeError(f"{name}: expected a tensor with data_ptr() or a ctypes array, got {type(obj).__name__}")

    def check(self, dtype, nbytes):
        """Raises unless the tensor holds nbytes of dtype (or raw storage of its width)."""
        if self.dtype not in _ACCEPTS[dtype]:
            raise ValueError(f"{self.name}: dtype {self.dtype}, expected {dtype}")
        if self.nbytes != nbytes:
            raise ValueError(f"{self.name}: {self.nbytes} bytes, expected {nbytes}")
        return self

    def located(self, device):
        """The pointer, once the tensor is known to be on device (None: host memory)."""
        if self.device != device:
            where = "host memory" if device is None else f"cuda:{device}"
            got = "host memory" if self.device is None else f"cuda:{self.device}"
            raise ValueError(f"{self.name}: in {got}, expected {where}")
        return self.ptr

    def expect(self, dtype, nbytes, engine):
        """The pointer of a tensor of nbytes of dtype in the engine's memory."""
        return self.check(dtype, nbytes).located(engine.device)


def _tensor(obj, name):
    return None if obj is None else _Tensor(obj, name)

# ---- Engine ----


class _Handle:
    """A library handle in _handle, released by close(): on leaving a with block or when collected."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None):
            self.close()


class Engine(_Handle):
    """An engine on one device: backend "auto" (CUDA when there is a device), "host" or "cuda".

    A CUDA engine works in the device's primary context, the one torch uses. device None:
    torch's current device when torch is imported and has a GPU, else HUMMING_DEVICE or local_rank.
    """

    def __init__(self, backend="auto", device=None, rank=-1, local_rank=0):
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r}: expected one of {sorted(BACKENDS)}")
        torch = sys.modules.get("torch")
        if device is None and backend != "host" and torch is not None and torch.cuda.is_available():
            device = torch.cuda.current_device()
        cfg = EngineConfig(ctypes.sizeof(EngineConfig), ENGINE_CONFIG_MAGIC, BACKENDS[backend],
                           -1 if device is None else int(device), int(rank), int(local_rank))
        self._handle = _c_vp()
        self._streams = {}
        self._layers = weakref.WeakSet()  # closed before the engine, which they use
        _check("hm_engine_create", _lib.hm_engine_create(ctypes.byref(cfg), ctypes.byref(self._handle)))
        self.backend = "cuda" if _lib.hm_engine_backend(self._handle) == BACKENDS["cuda"] else "host"
        # Where the engine's memory is, as _Tensor.device says it: None for host memory.
        self.device = None if self.backend == "host" else _lib.hm_engine_device(self._handle)
        self.device_name = _lib.hm_engine_device_name(self._handle).decode()
        self.arch = _lib.hm_engine_arch(self._handle)

    def _live(self):
        if not self._handle:
            raise ValueError("the engine is closed")
        return self._handle

    def stream(self, stream=None):
        """The hm_stream wrapping a caller's stream: a torch.cuda.Stream, a CUstream as int, or
        None for torch's current stream on this device (the default stream without torch)."""
        if self.backend == "host":
            handle = 0
        elif stream is None:
            torch = sys.modules.get("torch")
            handle = torch.cuda.current_stream(self.device).cuda_stream if torch is not None else 0
        else:
            handle = int(getattr(stream, "cuda_stream", stream))
        wrapped = self._streams.get(handle)
        if wrapped is None:
            wrapped = _c_vp()
            _check("hm_stream_wrap", _lib.hm_stream_wrap(self._live(), _c_vp(handle), ctypes.byref(wrapped)))
            self._streams[handle] = wrapped
        return wrapped

    def synchronize(self, stream=None):
        _check("hm_stream_synchronize", _lib.hm_stream_synchronize(self.stream(stream)))

    def close(self):
        """Closes the engine's layers, its stream wrappers (not the streams), then the engine."""
        for layer in list(self._layers):
            layer.close()
        for wrapped in self._streams.values():
            _lib.hm_stream_destroy(wrapped)
        self._streams = {}
        if self._handle:
            _lib.hm_engine_destroy(self._handle)
            self._handle = _c_vp()

# ---- MoE layer ----


_ROUTER_KEYS = ("experts", "top_k", "groups", "topk_group", "correction_bias", "renormalize", "scaling")
_CONFIG_KEYS = ("model", "scheme", "hidden", "intermediate", "activation", "layout", "shared_experts",
                "shared_intermediate", "scoring") + _ROUTER_KEYS


def _enum(table, key, value):
    if value not in table:
        raise ValueError(f"MoE config {key}={value!r}: expected one of {sorted(table)}")
    return table[value]


def moe_config(spec=None, **overrides):
    """An hm_moe_config from a model preset name or a dict (keys: model, scheme, hidden,
    intermediate, experts, top_k, scoring, groups, topk_group, correction_bias, renormalize,
    scaling, activation, layout, shared_experts, shared_intermediate), overrides last."""
    d = {"model": spec} if isinstance(spec, str) else dict(spec or {})
    d.update(overrides)
    unknown = sorted(set(d) - set(_CONFIG_KEYS))
    if unknown:
        raise ValueError(f"unknown MoE config key(s) {unknown}: known are {list(_CONFIG_KEYS)}")
    cfg = MoeConfig(size=ctypes.sizeof(MoeConfig), magic=MOE_CONFIG_MAGIC)
    cfg.router.groups, cfg.router.topk_group, cfg.router.scaling = 1, 1, 1.0
    _check("hm_quant_scheme_parse", _lib.hm_quant_scheme_parse(b"bf16", ctypes.byref(cfg.scheme)))
    if "model" in d:
        _check("hm_moe_config_for_model", _lib.hm_moe_config_for_model(d["model"].encode(), ctypes.byref(cfg)))
    if "scheme" in d:
        _check("hm_quant_scheme_parse", _lib.hm_quant_scheme_parse(d["scheme"].encode(), ctypes.byref(cfg.scheme)))
    for key in ("hidden", "intermediate", "shared_experts", "shared_intermediate"):
        if key in d:
            setattr(cfg, key, int(d[key]))
    for key in _ROUTER_KEYS:
        if key in d:
            setattr(cfg.router, key, d[key])
    if "scoring" in d:
        cfg.router.scoring = _enum(SCORINGS, "scoring", d["scoring"])
    if "activation" in d:
        cfg.activation = _enum(ACTIVATIONS, "activation", d["activation"])
    if "layout" in d:
        cfg.layout = _enum(LAYOUTS, "layout", d["layout"])
    return cfg


_WEIGHT_KEYS = ("qweight", "scales", "zeros", "global_scale")


class MoeLayer(_Handle):
    """A MoE layer on an engine (hm_moe_layer): create, load or quantize, transform, forward."""

    def __init__(self, engine, config=None, **overrides):
        self.engine = engine  # the engine must outlive the layer
        self.config = config if isinstance(config, MoeConfig) else moe_config(config, **overrides)
        self._handle = _c_vp()
        _check("hm_moe_layer_create",
               _lib.hm_moe_layer_create(engine._live(), ctypes.byref(self.config), ctypes.byref(self._handle)))
        engine._layers.add(self)
        c = self.config
        self.hidden, self.intermediate = c.hidden, c.intermediate
        self.experts, self.top_k = c.router.experts, c.router.top_k
        self.gate_up_rows = c.intermediate if c.activation == ACTIVATIONS["relu2"] else 2 * c.intermediate
        per_shared = c.shared_intermediate or c.intermediate
        self.shared_width = c.shared_experts * per_shared
        self.scale_dtype = _lib.hm_dtype_name(c.scheme.weight.scale).decode()

    def _live(self):
        if not self._handle:
            raise ValueError("the MoE layer is closed")
        return self._handle

    def weights_bytes(self, shared=False):
        """Bytes of each canonical array (qweight, scales, zeros, global_scale) of gate_up and down."""
        gu, dn = WeightsBytes(), WeightsBytes()
        _check("hm_moe_layer_weights_bytes",
               _lib.hm_moe_layer_weights_bytes(self._live(), shared, ctypes.byref(gu), ctypes.byref(dn)))
        return ({k: getattr(gu, k) for k in _WEIGHT_KEYS}, {k: getattr(dn, k) for k in _WEIGHT_KEYS})

    def _dtype_of(self, key):
        return {"qweight": "i32", "zeros": "i32", "global_scale": "f32"}.get(key, self.scale_dtype)

    def _view(self, what, arrays, sizes):
        unknown = sorted(set(arrays) - set(_WEIGHT_KEYS))
        if unknown:
            raise ValueError(f"{what}: unknown array(s) {unknown}: expected {list(_WEIGHT_KEYS)}")
        view, devices = WeightsView(), set()
        for key in _WEIGHT_KEYS:
            t = _tensor(arrays.get(key), f"{what}[{key!r}]")
            if sizes[key] == 0 and t is not None:
                raise ValueError(f"{what}[{key!r}]: this scheme has no such array")
            if sizes[key] > 0 and t is None:
                raise ValueError(f"{what}[{key!r}] is required ({sizes[key]} bytes)")
            if t is not None:
                t.check(self._dtype_of(key), sizes[key])
                devices.add(t.device)
                setattr(view, key, t.ptr)
        return view, devices

    def _load(self, gate_up, down, shared, stream):
        size_gu, size_dn = self.weights_bytes(shared)
        vgu, dev_gu = self._view("shared gate_up" if shared else "gate_up", gate_up, size_gu)
        vdn, dev_dn = self._view("shared down" if shared else "down", down, size_dn)
        devices = dev_gu | dev_dn
        if len(devices) != 1:
            raise ValueError(f"weights are on several devices {sorted(map(str, devices))}: put them together")
        device = devices.pop()
        suffix = "_shared" if shared else ""
        if device is None:
            fn = getattr(_lib, f"hm_moe_layer_load{suffix}")
            _check(fn.__name__, fn(self._live(), ctypes.byref(vgu), ctypes.byref(vdn)))
            return
        if device != self.engine.device:
            raise ValueError(f"weights on {device}, the engine's memory is on {self.engine.device_name}")
        fn = getattr(_lib, f"hm_moe_layer_load{suffix}_device")
        _check(fn.__name__, fn(self._live(), ctypes.byref(vgu), ctypes.byref(vdn), self.engine.stream(stream)))

    def load(self, gate_up, down, stream=None):
        """Routed expert weights in the canonical contract: dicts of qweight, scales, zeros,
        global_scale as the scheme needs, all in host memory or all on the engine's device
        (copied after the work queued on stream; the tensors may be freed on return)."""
        self._load(gate_up, down, False, stream)

    def load_shared(self, gate_up, down, stream=None):
        self._load(gate_up, down, True, stream)

    def _quantize(self, fn, gate_up, down, experts, rows, width):
        gu = _Tensor(gate_up, "gate_up").check("f32", experts * rows * self.hidden * 4).located(None)
        dn = _Tensor(down, "down").check("f32", experts * self.hidden * width * 4).located(None)
        _check(fn.__name__, fn(self._live(), gu, dn))

    def quantize(self, gate_up, down):
        """f32 host weights gate_up (E, 2I, H) ((E, I, H) for relu2) and down (E, H, I), rounded to the scheme."""
        self._quantize(_lib.hm_moe_layer_quantize, gate_up, down, self.experts, self.gate_up_rows,
                       self.intermediate)

    def quantize_shared(self, gate_up, down):
        """f32 host weights of the shared experts: gate_up (2*S*Is, H) ((S*Is, H) for relu2), down (H, S*Is)."""
        rows = self.shared_width if self.config.activation == ACTIVATIONS["relu2"] else 2 * self.shared_width
        self._quantize(_lib.hm_moe_layer_quantize_shared, gate_up, down, 1, rows, self.shared_width)

    def set_router_bias(self, bias, stream=None):
        """The router's f32 correction bias [E], from the host or from the engine's device (copied on stream)."""
        t = _Tensor(bias, "bias").check("f32", self.experts * 4)
        if t.device is None:
            _check("hm_moe_layer_set_router_bias", _lib.hm_moe_layer_set_router_bias(self._live(), t.ptr))
            return
        ptr = t.located(self.engine.device)
        _check("hm_moe_layer_set_router_bias_device",
               _lib.hm_moe_layer_set_router_bias_device(self._live(), ptr, self.engine.stream(stream)))

    def transform(self, stream=None):
        """Repacks the weights for the kernels and compiles them (waits for stream)."""
        _check("hm_moe_layer_transform", _lib.hm_moe_layer_transform(self._live(), self.engine.stream(stream)))

    def reserve(self, max_tokens, stream=None):
        """Workspace for up to max_tokens, so that later forwards never wait on the host (graph capture)."""
        _check("hm_moe_layer_reserve",
               _lib.hm_moe_layer_reserve(self._live(), int(max_tokens), self.engine.stream(stream)))

    def forward(self, x, y, router_logits=None, topk_ids=None, topk_weights=None, stream=None):
        """y[T, H] bf16 = the layer on x[T, H] bf16, routed by router_logits [T, E] f32 or by the
        caller's topk_ids [T, top_k] int32 and topk_weights [T, top_k] f32. Enqueued on stream
        (None: torch's current stream); returns without waiting."""
        eng = self.engine
        tx = _Tensor(x, "x")
        row = self.hidden * 2
        if tx.nbytes % row != 0:
            raise ValueError(f"x: {tx.nbytes} bytes is not a whole number of rows of H={self.hidden} bf16")
        tokens = tx.nbytes // row
        args = MoeForwardArgs(tokens=tokens, x=tx.expect("bf16", tokens * row, eng),
                              y=_Tensor(y, "y").expect("bf16", tokens * row, eng))
        if topk_ids is not None or topk_weights is not None:
            if topk_ids is None or topk_weights is None:
                raise ValueError("topk_ids and topk_weights go together")
            args.topk_ids = _Tensor(topk_ids, "topk_ids").expect("i32", tokens * self.top_k * 4, eng)
            args.topk_weights = _Tensor(topk_weights, "topk_weights").expect("f32", tokens * self.top_k * 4, eng)
        elif router_logits is not None:
            args.router_logits = _Tensor(router_logits, "router_logits").expect("f32", tokens * self.experts * 4, eng)
        else:
            raise ValueError("forward needs router_logits, or topk_ids and topk_weights")
        _check("hm_moe_layer_forward", _lib.hm_moe_layer_forward(self._live(), ctypes.byref(args), eng.stream(stream)))

    def stats(self):
        """What the last forward did: layout, tokens, launches (and stage times when profiling)."""
        s = MoeStats()
        _check("hm_moe_layer_stats", _lib.hm_moe_layer_stats(self._live(), ctypes.byref(s)))
        return {"layout": _lib.hm_moe_layout_name(s.layout).decode(), "tokens": s.tokens, "launches": s.launches}

    def close(self):
        if self._handle:
            _lib.hm_moe_layer_destroy(self._handle)
            self._handle = _c_vp()
