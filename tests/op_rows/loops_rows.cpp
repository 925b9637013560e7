// Loop rows: K::rnn, map_fn, foldl, foldr on the Scan op (ops/rnn.hpp); the body runs on the
// backend under test. Provenance of expected values: "by hand" = written out next to the values;
// "formula" = the naive float64 reference (op_rows/naive.hpp) run step by step. The equivalence
// of the symbolic loop with the unrolled graph under every rnn option, masking and the loop
// errors are in test_rnn.cpp.
#include "op_rows/op_row.hpp"

namespace ktape::op_rows {

std::vector<OpRow> loops_rows() {
  Rows t("loops");
  Gen g(20240617);
  const Shape s34{3, 4};

  // h_t = tanh(x_t W + h_{t-1} U), h_0 = 0; outputs (samples, time, units).
  t.op("rnn_simple",
       [](const V& x) {
         auto r = K::rnn(
             [&](const Tensor& xt, const V& s) -> std::pair<Tensor, V> {
               Tensor h = K::tanh(K::dot(xt, x[1]) + K::dot(s[0], x[2]));
               return {h, {h}};
             },
             x[0], {K::zeros_like(K::dot(K::sum(x[0], 1), x[1]))});
         return r.outputs;
       },
       {g.normal({2, 3, 4}), g.normal({4, 3}), g.normal({3, 3})})
      .ref_gradcheck()
      .formula([](const In& in) {
        const naive::Arr x = in[0], W = in[1], U = in[2];
        naive::Arr h = naive::full({2, 3}, 0.0);
        std::vector<naive::Arr> outs;
        for (std::int64_t step = 0; step < 3; ++step) {
          const naive::Arr xt = naive::reshape(naive::slice(x, {0, step, 0}, {2, 1, 4}), {2, 4});
          h = naive::tanh(naive::add(naive::dot(xt, W), naive::dot(h, U)));
          outs.push_back(h);
        }
        return naive::stack(outs, 1);
      })
      .error("input_rank_2", Err::Value, "K::rnn: Input should be at least 3D", [] {
        (void)K::rnn(
            [](const Tensor& xt, const V& s) -> std::pair<Tensor, V> {
              return {xt, s};
            },
            K::placeholder({2, 3}), {K::placeholder({3})});
      });
  t.op("map_fn_square",
       [](const V& x) { return K::map_fn([](const Tensor& e) { return K::square(e); }, x[0]); },
       {g.normal(s34)})
      .formula([](const In& in) { return naive::sq(in[0]); })
      .error("scalar_elems", Err::Value, "K::map_fn: elems must have at least one axis",
             [] { (void)K::map_fn([](const Tensor& e) { return e; }, cst({1}, {})); });
  // A loop: the gradient of the reverse scan (a storing twin recomputes the forward).
  t.op("map_fn_tanh",
       [](const V& x) { return K::map_fn([](const Tensor& e) { return K::tanh(e) * e; }, x[0]); },
       {g.normal(s34)})
      .second_order()
      .formula([](const In& in) { return naive::mul(naive::tanh(in[0]), in[0]); });
  // The product of the rows: x[0] * x[1] * x[2]
  t.op("foldl_product",
       [](const V& x) {
         return K::foldl([](const Tensor& a, const Tensor& e) { return a * e; }, x[0]);
       },
       {g.normal(s34)})
      .formula([](const In& in) {
        auto row = [&](std::int64_t r) { return naive::slice(in[0], {r, 0}, {1, 4}); };
        return naive::reshape(naive::mul(naive::mul(row(0), row(1)), row(2)), {4});
      })
      .error("scalar_elems", Err::Value, "K::foldl: elems must have at least one axis", [] {
        (void)K::foldl([](const Tensor& a, const Tensor& e) { return a + e; }, cst({1}, {}));
      });

  // ---- by hand: the order of the folds ----------------------------------------------------------
  // x = [[1,2],[10,20],[100,200]]; foldl(a - e) = x0 - x1 - x2 = [1-10-100, 2-20-200];
  // foldr(a - e) starts from the last row: x2 - x1 - x0 = [100-10-1, 200-20-2].
  {
    const In x = {f64({1, 2, 10, 20, 100, 200}, {3, 2})};
    t.values(
         "foldl_order_by_hand",
         [](const V& v) {
           return K::foldl([](const Tensor& a, const Tensor& e) { return a - e; }, v[0]);
         },
         x)
        .expect({-109, -218}, {2})
        .error("null_result", Err::Value, "K::foldl: fn returned a null tensor", [] {
          (void)K::foldl([](const Tensor&, const Tensor&) { return Tensor(); }, cst({1, 2}, {2}));
        });
    t.values(
         "foldr_order_by_hand",
         [](const V& v) {
           return K::foldr([](const Tensor& a, const Tensor& e) { return a - e; }, v[0]);
         },
         x)
        .expect({89, 178}, {2})
        .error("scalar_elems", Err::Value, "K::foldr: elems must have at least one axis", [] {
          (void)K::foldr([](const Tensor& a, const Tensor& e) { return a + e; }, cst({1}, {}));
        });
    // With an initializer [1000, 1000]: foldl(a - e) = 1000 - 1 - 10 - 100 = 889, 1000 - 222 = 778
    t.values(
         "foldl_initializer_by_hand",
         [](const V& v) {
           return K::foldl([](const Tensor& a, const Tensor& e) { return a - e; }, v[0],
                           {.initializer = const_like(v[0], f64({1000, 1000}, {2}))});
         },
         x)
        .expect({889, 778}, {2});
    // map_fn over the rows: each row times its own sum: [1,2]*3, [10,20]*30, [100,200]*300
    t.values(
         "map_fn_by_hand",
         [](const V& v) { return K::map_fn([](const Tensor& e) { return e * K::sum(e); }, v[0]); },
         x)
        .expect({3, 6, 300, 600, 30000, 60000}, {3, 2})
        .error("null_result", Err::Value, "K::map_fn: fn returned a null tensor", [] {
          (void)K::map_fn([](const Tensor&) { return Tensor(); }, cst({1, 2}, {2}));
        });
  }
  // A running sum through K::rnn: x (1, 3, 2) = [[[1,2],[3,4],[5,6]]]; h_t = h_{t-1} + x_t from 0:
  // outputs [[1,2],[4,6],[9,12]], last output [9,12].
  t.values("rnn_running_sum_by_hand",
           [](const V& v) {
             auto r = K::rnn(
                 [](const Tensor& xt, const V& s) -> std::pair<Tensor, V> {
                   const Tensor h = s[0] + xt;
                   return {h, {h}};
                 },
                 v[0], {K::zeros_like(K::sum(v[0], 1))});
             return r.outputs;
           },
           {f64({1, 2, 3, 4, 5, 6}, {1, 3, 2})})
      .expect({1, 2, 4, 6, 9, 12}, {1, 3, 2})
      .error("empty_step_function", Err::Value, "K::rnn: step_function is empty", [] {
        (void)K::rnn(K::StepFunction(), K::placeholder({1, 3, 2}), {K::placeholder({1, 2})});
      });
  return t.take();
}

}  // namespace ktape::op_rows
