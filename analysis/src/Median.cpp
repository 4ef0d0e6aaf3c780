#include "Median.h"

#include <algorithm>
#include <cstddef>
#include <limits>

namespace attnscope {
namespace analysis {
namespace detail {

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + mid);
  return 0.5 * (lo + hi);
}

}  // namespace detail
}  // namespace analysis
}  // namespace attnscope
