// The README's first C++ snippet (see tests/CMakeLists.txt), run once: it must compile as shown
// and train one step to a finite loss.
#include <cmath>
#include <cstdio>

#include "ktape/ktape.hpp"

int main() {
#include "readme_snippet.inc"
  const double first = out[0].item();
  const double second = train({xb, tb})[0].item();
  std::printf("README snippet: loss %g then %g\n", first, second);
  return std::isfinite(first) && second < first ? 0 : 1;
}
