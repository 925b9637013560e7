#!/usr/bin/env python3
"""Reference trajectories for tests/test_optimizers.cpp.

Implements the update rules of Keras 2.2.4's keras/optimizers.py in plain NumPy float64, from
the formulas in spec/keras_semantics.md section 5 (not from ktape's code), on the problem

    loss(W, b) = sum((X @ W + b - Y)**2),   W: (3, 2), b: (2,)

and prints C++ tables for the test. Regenerate with:
    python3 tests/data/optim_reference.py > tests/data/optim_reference.inc
Every update reads the values from before the step (Keras's simultaneous assignment semantics);
`it` is the iteration count before the step, so t = it + 1.
"""
import numpy as np

X = np.array([[1.0, 2.0, -1.0], [0.5, -1.0, 2.0], [-1.5, 0.3, 1.0], [2.0, 1.0, 0.5]])
Y = np.array([[1.0, -1.0], [0.0, 2.0], [0.5, 0.5], [-1.0, 1.0]])
W0 = np.array([[0.1, -0.2], [0.3, 0.4], [-0.5, 0.2]])
B0 = np.array([0.05, -0.1])
STEPS = 5
EPS = 1e-7  # K.epsilon()


def grads(W, b):
    d = 2.0 * (X @ W + b - Y)
    return [X.T @ d, d.sum(axis=0)]


def process(gs, clipnorm=None, clipvalue=None):
    """Optimizer.get_gradients: global-norm clipping, then value clipping."""
    if clipnorm is not None and clipnorm > 0:
        norm = np.sqrt(sum(np.sum(np.square(g)) for g in gs))
        if norm >= clipnorm:
            gs = [g * (clipnorm / norm) for g in gs]
    if clipvalue is not None and clipvalue > 0:
        gs = [np.clip(g, -clipvalue, clipvalue) for g in gs]
    return gs


def decayed(lr, decay, it):
    return lr * (1.0 / (1.0 + decay * float(it))) if decay > 0 else lr


def sgd(lr=0.01, momentum=0.0, decay=0.0, nesterov=False, **clip):
    ps = [W0.copy(), B0.copy()]
    ms = [np.zeros_like(p) for p in ps]
    for it in range(STEPS):
        gs = process(grads(*ps), **clip)
        lr_ = decayed(lr, decay, it)
        for i, (p, g, m) in enumerate(zip(ps, gs, ms)):
            v = momentum * m - lr_ * g
            ms[i] = v
            ps[i] = p + momentum * v - lr_ * g if nesterov else p + v
        yield ps, {"moment": ms}


def rmsprop(lr=0.001, rho=0.9, epsilon=EPS, decay=0.0, **clip):
    ps = [W0.copy(), B0.copy()]
    acc = [np.zeros_like(p) for p in ps]
    for it in range(STEPS):
        gs = process(grads(*ps), **clip)
        lr_ = decayed(lr, decay, it)
        for i, (p, g, a) in enumerate(zip(ps, gs, acc)):
            new_a = rho * a + (1.0 - rho) * g**2
            acc[i] = new_a
            ps[i] = p - lr_ * g / (np.sqrt(new_a) + epsilon)
        yield ps, {"accumulator": acc}


def adagrad(lr=0.01, epsilon=EPS, decay=0.0, **clip):
    ps = [W0.copy(), B0.copy()]
    acc = [np.zeros_like(p) for p in ps]
    for it in range(STEPS):
        gs = process(grads(*ps), **clip)
        lr_ = decayed(lr, decay, it)
        for i, (p, g, a) in enumerate(zip(ps, gs, acc)):
            new_a = a + g**2
            acc[i] = new_a
            ps[i] = p - lr_ * g / (np.sqrt(new_a) + epsilon)
        yield ps, {"accumulator": acc}


def adadelta(lr=1.0, rho=0.95, epsilon=EPS, decay=0.0, **clip):
    ps = [W0.copy(), B0.copy()]
    acc = [np.zeros_like(p) for p in ps]
    dacc = [np.zeros_like(p) for p in ps]
    for it in range(STEPS):
        gs = process(grads(*ps), **clip)
        lr_ = decayed(lr, decay, it)
        for i, (p, g, a, da) in enumerate(zip(ps, gs, acc, dacc)):
            new_a = rho * a + (1.0 - rho) * g**2
            upd = g * np.sqrt(da + epsilon) / np.sqrt(new_a + epsilon)
            ps[i] = p - lr_ * upd
            acc[i] = new_a
            dacc[i] = rho * da + (1.0 - rho) * upd**2
        yield ps, {"accumulator": acc, "delta_accumulator": dacc}


def adam(lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=EPS, decay=0.0, amsgrad=False, **clip):
    ps = [W0.copy(), B0.copy()]
    ms = [np.zeros_like(p) for p in ps]
    vs = [np.zeros_like(p) for p in ps]
    vh = [np.zeros_like(p) for p in ps]
    for it in range(STEPS):
        gs = process(grads(*ps), **clip)
        lr_ = decayed(lr, decay, it)
        t = float(it) + 1.0
        lr_t = lr_ * (np.sqrt(1.0 - beta_2**t) / (1.0 - beta_1**t))
        for i, (p, g, m, v) in enumerate(zip(ps, gs, ms, vs)):
            m_t = beta_1 * m + (1.0 - beta_1) * g
            v_t = beta_2 * v + (1.0 - beta_2) * g**2
            if amsgrad:
                vhat_t = np.maximum(vh[i], v_t)
                vh[i] = vhat_t
                ps[i] = p - lr_t * m_t / (np.sqrt(vhat_t) + epsilon)
            else:
                ps[i] = p - lr_t * m_t / (np.sqrt(v_t) + epsilon)
            ms[i], vs[i] = m_t, v_t
        yield ps, {"m": ms, "v": vs, "vhat": vh}


def adamax(lr=0.002, beta_1=0.9, beta_2=0.999, epsilon=EPS, decay=0.0, **clip):
    ps = [W0.copy(), B0.copy()]
    ms = [np.zeros_like(p) for p in ps]
    us = [np.zeros_like(p) for p in ps]
    for it in range(STEPS):
        gs = process(grads(*ps), **clip)
        lr_ = decayed(lr, decay, it)
        t = float(it) + 1.0
        lr_t = lr_ / (1.0 - beta_1**t)
        for i, (p, g, m, u) in enumerate(zip(ps, gs, ms, us)):
            m_t = beta_1 * m + (1.0 - beta_1) * g
            u_t = np.maximum(beta_2 * u, np.abs(g))
            ps[i] = p - lr_t * m_t / (u_t + epsilon)
            ms[i], us[i] = m_t, u_t
        yield ps, {"m": ms, "u": us}


def nadam(lr=0.002, beta_1=0.9, beta_2=0.999, epsilon=EPS, schedule_decay=0.004, **clip):
    ps = [W0.copy(), B0.copy()]
    ms = [np.zeros_like(p) for p in ps]
    vs = [np.zeros_like(p) for p in ps]
    m_schedule = 1.0
    for it in range(STEPS):
        gs = process(grads(*ps), **clip)
        t = float(it) + 1.0
        mc_t = beta_1 * (1.0 - 0.5 * 0.96 ** (t * schedule_decay))
        mc_t1 = beta_1 * (1.0 - 0.5 * 0.96 ** ((t + 1.0) * schedule_decay))
        ms_new = m_schedule * mc_t
        ms_next = m_schedule * mc_t * mc_t1
        for i, (p, g, m, v) in enumerate(zip(ps, gs, ms, vs)):
            g_prime = g / (1.0 - ms_new)
            m_t = beta_1 * m + (1.0 - beta_1) * g
            m_t_prime = m_t / (1.0 - ms_next)
            v_t = beta_2 * v + (1.0 - beta_2) * g**2
            v_t_prime = v_t / (1.0 - beta_2**t)
            m_t_bar = (1.0 - mc_t) * g_prime + mc_t1 * m_t_prime
            ps[i] = p - lr * m_t_bar / (np.sqrt(v_t_prime) + epsilon)
            ms[i], vs[i] = m_t, v_t
        m_schedule = ms_new
        yield ps, {"m": ms, "v": vs, "m_schedule": [np.array([m_schedule])]}


# name, generator, slots to print after the last step. Keep in sync with kCases in the test.
CASES = [
    ("sgd", sgd(lr=0.02), []),
    ("sgd_momentum", sgd(lr=0.01, momentum=0.9), ["moment"]),
    ("sgd_nesterov", sgd(lr=0.01, momentum=0.9, nesterov=True), ["moment"]),
    ("sgd_decay", sgd(lr=0.02, momentum=0.5, decay=0.3), []),
    ("sgd_clipnorm", sgd(lr=0.01, clipnorm=16.0), []),  # clips steps 1-2 only
    ("sgd_clipvalue", sgd(lr=0.05, momentum=0.5, clipvalue=2.0), []),
    ("sgd_clipnorm_clipvalue", sgd(lr=0.05, clipnorm=10.0, clipvalue=1.0), []),
    ("rmsprop", rmsprop(lr=0.01), ["accumulator"]),
    ("rmsprop_decay", rmsprop(lr=0.01, rho=0.8, epsilon=1e-3, decay=0.2), []),
    ("adagrad", adagrad(lr=0.1), ["accumulator"]),
    ("adagrad_decay", adagrad(lr=0.1, decay=0.25), []),
    ("adadelta", adadelta(), ["accumulator", "delta_accumulator"]),
    ("adadelta_decay", adadelta(lr=0.5, rho=0.9, epsilon=1e-4, decay=0.1), []),
    ("adam", adam(lr=0.01), ["m", "v"]),
    ("adam_amsgrad", adam(lr=0.05, beta_2=0.5, amsgrad=True), ["vhat"]),
    ("adam_decay", adam(lr=0.01, beta_1=0.8, decay=0.2), []),
    ("adamax", adamax(lr=0.02), ["u"]),
    ("adamax_decay", adamax(lr=0.02, beta_2=0.9, decay=0.2), []),
    ("nadam", nadam(lr=0.02), ["m_schedule", "v"]),
    ("nadam_schedule", nadam(lr=0.01, beta_1=0.8, schedule_decay=0.1, epsilon=1e-5), []),
]


def snapshot(ps, slots):
    return [p.copy() for p in ps], {k: [a.copy() for a in v] for k, v in slots.items()}


def fmt(values, indent):
    """%.17g values, comma-separated, wrapped to lines of at most 100 characters."""
    lines, line = [], ""
    for i, v in enumerate(values):
        item = "%.17g" % v + ("," if i + 1 < len(values) else "")
        if line and len(indent) + len(line) + 1 + len(item) > 97:
            lines.append(line)
            line = item
        else:
            line = item if not line else line + " " + item
    lines.append(line)
    return ("\n" + indent).join(lines)


def main():
    print("// Generated by tests/data/optim_reference.py; do not edit by hand.")
    for name, gen, slot_names in CASES:
        traj = [snapshot(ps, slots) for ps, slots in gen]
        print("{\"%s\",\n {" % name)
        for ps, _ in traj:
            print("  {%s}," % fmt(np.concatenate([p.ravel() for p in ps]), "   "))
        print(" },\n {")
        last = traj[-1][1]
        for s in slot_names:
            values = np.concatenate([a.ravel() for a in last[s]])
            print("  {\"%s\",\n   {%s}}," % (s, fmt(values, "    ")))
        print(" }},")


if __name__ == "__main__":
    main()
