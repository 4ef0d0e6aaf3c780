#pragma once

#include <vector>

namespace attnscope {
namespace analysis {
namespace detail {

// Median of v (the mean of the two middle values for an even count); NaN when v is empty.
double median(std::vector<double> v);

}  // namespace detail
}  // namespace analysis
}  // namespace attnscope
