// Control rows: switch_, in_train_phase with a static phase, and the updates (update,
// update_add, update_sub, moving_average_update) as values (ops/control.hpp). Provenance of
// expected values: "by hand" = written out next to the values; "formula" = the naive float64
// reference (op_rows/naive.hpp). The learning phase itself (dynamic and static, which branch is
// called) and gradient semantics are ordinary tests in test_ops.cpp / test_gradcheck.cpp.
#include "op_rows/op_row.hpp"

namespace ktape::op_rows {

namespace {

// A variable of x's dtype holding `value` (a fresh one for every graph the row builds).
Tensor var_like(const Tensor& x, const std::vector<double>& value, const Shape& s) {
  return K::variable(f64(value, s), {.dtype = K::dtype(x)});
}

}  // namespace

std::vector<OpRow> control_rows() {
  Rows t("control");
  Gen g(20240616);
  const Shape s34{3, 4};

  // ---- switch_: random inputs -----------------------------------------------------------------
  // A rank-1 condition selects rows: then-rows 0 and 2, else-row 1.
  t.op("switch_rows",
       [](const V& x) {
         const Tensor cond = K::constant(f64({1, 0, 1}, {3}), {.dtype = "bool"});
         return K::switch_(cond, x[0], x[1]);
       },
       {g.normal(s34), g.normal(s34)})
      .formula([](const In& in) {
        return naive::where(naive::Arr({3, 1}, {1, 0, 1}), in[0], in[1]);
      });
  t.op("switch_scalar",
       [](const V& x) { return K::switch_(const_like(x[0], f64({0}, {})), x[0], x[1] * x[1]); },
       {g.normal(s34), g.normal(s34)})
      .formula([](const In& in) { return naive::sq(in[1]); });
  t.op("switch_broadcast_branch",
       [](const V& x) {
         const Tensor cond = K::constant(f64({0, 1, 1, 0}, {2, 2}), {.dtype = "bool"});
         return K::switch_(cond, x[0], x[1]);
       },
       {g.normal({2, 2}), g.normal({2})})
      .formula([](const In& in) {
        return naive::where(naive::Arr({2, 2}, {0, 1, 1, 0}), in[0], in[1]);
      });
  t.op("switch_rows_square_exp",
       [](const V& x) {
         const Tensor cond = K::constant(f64({1, 0, 1}, {3}), {.dtype = "bool"});
         return K::switch_(cond, K::square(x[0]), K::exp(x[0]));
       },
       {g.uniform(s34, -1, 1)})
      .second_order()
      .formula([](const In& in) {
        return naive::where(naive::Arr({3, 1}, {1, 0, 1}), naive::sq(in[0]), naive::exp(in[0]));
      });
  t.op("in_train_phase_static",
       [](const V& x) { return K::in_train_phase([&] { return K::exp(x[0]); }, x[0], 1); },
       {g.normal(s34)})
      .formula([](const In& in) { return naive::exp(in[0]); })
      .error("training_not_0_or_1", Err::Value,
             "K::in_train_phase: `training` must be 0, 1 or a tensor, got 2",
             [] { (void)K::in_train_phase(cst({1}, {1}), cst({2}, {1}), 2); });

  // ---- switch_ by hand ------------------------------------------------------------------------
  {
    // cond [1,0,0,1] selects rows 0 and 3 from `then` and rows 1 and 2 from `else`.
    const In in = {f64({1, 0, 0, 1}, {4}), f64({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3}),
                   f64({-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12}, {4, 3})};
    const std::vector<double> want = {1, 2, 3, -4, -5, -6, -7, -8, -9, 10, 11, 12};
    t.values(
         "switch_rank1_condition", [](const V& v) { return K::switch_(v[0], v[1], v[2]); }, in)
        .expect(want, {4, 3})
        .error("condition_rank_above_branches", Err::Value,
               "K::switch_: Rank of `condition` should be less than or equal to rank of "
               "`then_expression` and `else_expression`. ndim(condition)=3",
               [] {
                 const Tensor th = cst(std::vector<double>(12, 1.0), {4, 3});
                 (void)K::switch_(cst(std::vector<double>(24, 1.0), {4, 3, 2}), th, th);
               })
        .error("branch_dtypes_differ", Err::Type, "K::switch_: operands have different dtypes", [] {
          (void)K::switch_(cst({1}, {}), cst(std::vector<double>(12, 1.0), {4, 3}),
                           cst({1}, {1}, "float64"));
        });
    // A bool condition works the same, and callables are accepted: [0.5,-1,-2,3] > 0.
    t.values("switch_bool_condition_callables",
             [](const V& v) {
               const Tensor bcond = K::greater(v[0], 0.0);
               return K::switch_(
                   bcond, [&] { return v[1]; }, [&] { return v[2]; });
             },
             {f64({0.5, -1, -2, 3}, {4}), in[1], in[2]})
        .expect(want, {4, 3});
  }
  {
    const In br = {f64({1, 2, 3, 4}, {2, 2}), f64({5, 6, 7, 8}, {2, 2})};
    // A scalar condition picks a whole branch.
    t.values(
         "switch_scalar_true", [](const V& v) { return K::switch_(cst({1}, {}), v[0], v[1]); }, br)
        .expect({1, 2, 3, 4}, {2, 2});
    t.values(
         "switch_scalar_false", [](const V& v) { return K::switch_(cst({0}, {}), v[0], v[1]); }, br)
        .expect({5, 6, 7, 8}, {2, 2});
    // elementwise condition [[1,0],[0,1]] -> [[1,6],[7,4]]
    t.values(
         "switch_same_rank_condition",
         [](const V& v) {
           return K::switch_(cst({1, 0, 0, 1}, {2, 2}), v[0], v[1]);
         },
         br)
        .expect({1, 6, 7, 4}, {2, 2});
    // rank-2 condition on rank-3 branches: padded on the right.
    // cond (2,2) = [[1,0],[0,1]] on (2,2,2) 1..8 vs zeros -> keeps [0][0][:], [1][1][:]
    t.values("switch_condition_padded_right",
             [](const V& v) {
               return K::switch_(cst({1, 0, 0, 1}, {2, 2}), v[0], v[1]);
             },
             {f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}), f64({0, 0, 0, 0, 0, 0, 0, 0}, {2, 2, 2})})
        .expect({1, 2, 0, 0, 0, 0, 7, 8}, {2, 2, 2});
  }

  // ---- updates as values: a fresh variable [1, 2] and x = [0.5, -3] -----------------------------
  // The output of an update is the variable's new value (the Function commits it only when the
  // update is passed as an update; test_function.cpp and test_safety.cpp cover committing).
  {
    const In x = {f64({0.5, -3}, {2})};
    t.values(
         "update_by_hand",
         [](const V& v) {
           return K::update(var_like(v[0], {1, 2}, {2}), v[0]);
         },
         x)
        .expect({0.5, -3}, {2})
        .error("not_a_variable", Err::Type, "K::update: `x` must be a variable",
               [] {
                 (void)K::update(cst({1, 2}, {2}), cst({3, 4}, {2}));
               })
        .error("dtype_differs", Err::Type, "is float32 but the new value is float64",
               [] {
                 (void)K::update(K::variable(f64({1, 2}, {2})), cst({3, 4}, {2}, "float64"));
               })
        .error("shape_differs", Err::Value, "has shape (2,) but the new value has shape (3,)", [] {
          (void)K::update(K::variable(f64({1, 2}, {2})), cst({3, 4, 5}, {3}));
        });
    // [1, 2] + [0.5, -3] = [1.5, -1]
    t.values(
         "update_add_by_hand",
         [](const V& v) {
           return K::update_add(var_like(v[0], {1, 2}, {2}), v[0]);
         },
         x)
        .expect({1.5, -1}, {2})
        .error("null_increment", Err::Value, "K::update_add: the increment is a null tensor", [] {
          (void)K::update_add(K::variable(f64({1, 2}, {2})), Tensor());
        });
    // [1, 2] - [0.5, -3] = [0.5, 5]
    t.values(
         "update_sub_by_hand",
         [](const V& v) {
           return K::update_sub(var_like(v[0], {1, 2}, {2}), v[0]);
         },
         x)
        .expect({0.5, 5}, {2})
        .error("not_a_variable", Err::Type, "K::update_sub: `x` must be a variable", [] {
          (void)K::update_sub(cst({1, 2}, {2}), cst({3, 4}, {2}));
        });
    // Without debiasing: x - (x - value) * (1 - momentum) = [1, 2] - ([1, 2] - x) * 0.1
    //   = [1 - 0.05, 2 - 0.5] = [0.95, 1.5]
    t.values(
         "moving_average_update_by_hand",
         [](const V& v) {
           return K::moving_average_update(var_like(v[0], {1, 2}, {2}), v[0], 0.9,
                                           {.zero_debias = false});
         },
         x)
        .expect({0.95, 1.5}, {2})
        .error("dtype_differs", Err::Type,
               "K::moving_average_update: operands have different dtypes", [] {
                 (void)K::moving_average_update(K::variable(f64({1, 2}, {2})),
                                                cst({3, 4}, {2}, "float64"), 0.9);
               });
    // With debiasing (the default), after one step: biased = 0 - (0 - x) * 0.1 = 0.1 x, and
    // x_new = biased / (1 - 0.9^1) = x: the value itself.
    t.values(
         "moving_average_update_zero_debias",
         [](const V& v) {
           return K::moving_average_update(var_like(v[0], {1, 2}, {2}), v[0], 0.9);
         },
         x)
        .expect({0.5, -3}, {2})
        .tol32(1e-6, 1e-6);
  }
  return t.take();
}

}  // namespace ktape::op_rows
