#!/usr/bin/env python3
"""Expected values for tests/test_conv.cpp, computed once with NumPy (1.24) by direct loops over
explicitly padded inputs: an implementation independent of ktape's kernels. Run with a Python
that has NumPy (Debian: /usr/bin/python3 with python3-numpy) and paste the printed arrays.

Inputs are the same closed formulas the C++ test uses: ramp(shape, mod, scale)[i] =
((i * 7) % mod - mod // 2) * scale over the row-major flat index i.
"""
import numpy as np


def ramp(shape, mod=11, scale=0.25):
    n = int(np.prod(shape))
    i = np.arange(n)
    return (((i * 7) % mod) - mod // 2).astype(np.float64).reshape(shape) * scale


def pads(ins, ks, strides, dilation, padding):
    eff = [(k - 1) * d + 1 for k, d in zip(ks, dilation)]
    if padding == "same":
        outs = [-(-i // s) for i, s in zip(ins, strides)]
        tot = [max((o - 1) * s + e - i, 0) for o, s, e, i in zip(outs, strides, eff, ins)]
        return [t // 2 for t in tot], [t - t // 2 for t in tot]
    if padding == "causal":
        return [dilation[0] * (ks[0] - 1)], [0]
    return [0] * len(ins), [0] * len(ins)


def conv(x, w, strides, padding="valid", dilation=None, cf=False, groups=1):
    """x (N, S..., C) [cf: (N, C, S...)], w (K..., C/groups, out): cross-correlation."""
    if cf:
        x = np.moveaxis(x, 1, -1)
    r = x.ndim - 2
    dilation = dilation or [1] * r
    ks = w.shape[:r]
    pb, pa = pads(x.shape[1:-1], ks, strides, dilation, padding)
    xp = np.pad(x, [(0, 0)] + list(zip(pb, pa)) + [(0, 0)])
    eff = [(k - 1) * d + 1 for k, d in zip(ks, dilation)]
    outs = [(p - e) // s + 1 for p, e, s in zip(xp.shape[1:-1], eff, strides)]
    cin_g = w.shape[r]
    cout = w.shape[r + 1]
    cout_g = cout // groups
    out = np.zeros((x.shape[0],) + tuple(outs) + (cout,))
    for o in np.ndindex(*outs):
        for k in np.ndindex(*ks):
            idx = tuple(oj * sj + kj * dj for oj, sj, kj, dj in zip(o, strides, k, dilation))
            patch = xp[(slice(None),) + idx + (slice(None),)]  # (N, C)
            for g in range(groups):
                out[(slice(None),) + o + (slice(g * cout_g, (g + 1) * cout_g),)] += (
                    patch[:, g * cin_g:(g + 1) * cin_g] @ w[k][:, g * cout_g:(g + 1) * cout_g])
    return np.moveaxis(out, -1, 1) if cf else out


def conv_transpose(x, w, out_shape, strides, padding="valid", cf=False):
    """The adjoint of conv: scatters x (N, O..., in) through w (K..., out, in)."""
    if cf:
        x = np.moveaxis(x, 1, -1)
        out_shape = [out_shape[0]] + list(out_shape[2:]) + [out_shape[1]]
    r = x.ndim - 2
    ks = w.shape[:r]
    pb, pa = pads(out_shape[1:-1], ks, strides, [1] * r, padding)
    padded = [n + b + a for n, b, a in zip(out_shape[1:-1], pb, pa)]
    y = np.zeros([out_shape[0]] + padded + [out_shape[-1]])
    for o in np.ndindex(*x.shape[1:-1]):
        for k in np.ndindex(*ks):
            idx = tuple(oj * sj + kj for oj, sj, kj in zip(o, strides, k))
            y[(slice(None),) + idx + (slice(None),)] += x[(slice(None),) + o + (slice(None),)] @ w[k].T
    y = y[(slice(None),) + tuple(slice(b, b + n) for b, n in zip(pb, out_shape[1:-1])) + (slice(None),)]
    return np.moveaxis(y, -1, 1) if cf else y


def pool(x, size, strides, padding, mode, cf=False):
    if cf:
        x = np.moveaxis(x, 1, -1)
    r = x.ndim - 2
    pb, pa = pads(x.shape[1:-1], size, strides, [1] * r, padding)
    fill = -np.inf if mode == "max" else np.nan
    xp = np.pad(x, [(0, 0)] + list(zip(pb, pa)) + [(0, 0)], constant_values=fill)
    outs = [(p - k) // s + 1 for p, k, s in zip(xp.shape[1:-1], size, strides)]
    out = np.zeros((x.shape[0],) + tuple(outs) + (x.shape[-1],))
    for o in np.ndindex(*outs):
        win = xp[(slice(None),) + tuple(slice(oj * sj, oj * sj + k) for oj, sj, k in zip(o, strides, size)) + (slice(None),)]
        win = win.reshape(x.shape[0], -1, x.shape[-1])
        out[(slice(None),) + o + (slice(None),)] = win.max(axis=1) if mode == "max" else np.nanmean(win, axis=1)
    return np.moveaxis(out, -1, 1) if cf else out


def show(name, a):
    flat = ", ".join(repr(round(float(v), 12)) for v in a.reshape(-1))
    print(f"// {name}: shape {tuple(a.shape)}\n{{{flat}}}\n")


if __name__ == "__main__":
    x2 = ramp((2, 5, 5, 3))
    w2 = ramp((3, 3, 3, 4), mod=5, scale=0.5)
    show("conv2d valid stride 1", conv(x2, w2, [1, 1]))
    show("conv2d same stride 2", conv(x2, w2, [2, 2], "same"))
    we = ramp((2, 2, 3, 2), mod=9, scale=0.5)
    show("conv2d even kernel same stride 1", conv(x2, we, [1, 1], "same"))
    show("conv2d dilation 2 same", conv(x2, w2, [1, 1], "same", [2, 2]))
    x2cf = ramp((2, 3, 5, 5))
    show("conv2d channels_first same stride 2", conv(x2cf, w2, [2, 2], "same", cf=True))
    x1 = ramp((2, 7, 2))
    w1 = ramp((3, 2, 3), mod=5, scale=0.5)
    show("conv1d causal dilation 2", conv(x1, w1, [1], "causal", [2]))
    show("conv1d same stride 3", conv(x1, w1, [3], "same"))
    x3 = ramp((1, 4, 3, 4, 2))
    w3 = ramp((2, 2, 3, 2, 2), mod=5, scale=0.5)
    show("conv3d same stride (2, 1, 2)", conv(x3, w3, [2, 1, 2], "same"))
    dk = ramp((3, 3, 3, 2), mod=5, scale=0.5)
    show("depthwise_conv2d same stride 2", conv(x2, dk.reshape(3, 3, 1, 6), [2, 2], "same", groups=3))
    xt = ramp((2, 3, 3, 4))
    wt = ramp((3, 3, 2, 4), mod=5, scale=0.5)
    show("conv2d_transpose (2, 6, 6, 2) same stride 2", conv_transpose(xt, wt, [2, 6, 6, 2], [2, 2], "same"))
    show("conv2d_transpose (2, 7, 7, 2) valid stride 2", conv_transpose(xt, wt, [2, 7, 7, 2], [2, 2], "valid"))
    xp = ramp((1, 5, 5, 2), mod=13)
    show("pool2d max 3x3 stride 2 same", pool(xp, [3, 3], [2, 2], "same", "max"))
    show("pool2d avg 3x3 stride 2 same", pool(xp, [3, 3], [2, 2], "same", "avg"))
    show("pool2d avg 2x2 stride 2 valid channels_first", pool(ramp((1, 2, 5, 5), mod=13), [2, 2], [2, 2], "valid", "avg", cf=True))
    show("pool3d max 2x2x2 stride 2 same", pool(ramp((1, 3, 3, 3, 2), mod=13), [2, 2, 2], [2, 2, 2], "same", "max"))
