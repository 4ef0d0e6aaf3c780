#pragma once

#include <cstdint>
#include <string>

namespace attnscope {
namespace detail {

// The key-value side channel the reporter's heartbeats, stop barrier and degraded rounds need,
// apart from the collectives: c10d's store behind it in the plugin (C10dKeyValueStore), a Fake in
// unit tests. Every call may throw std::exception (the store is gone, or timed out); the reporter
// then never touches the store again. Called from the reporter's two threads at once.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value of an existing key (check() it first).
  virtual std::string get(const std::string& key) = 0;
  // Adds `delta` to the integer at `key` (0 when absent) and returns the sum.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual bool check(const std::string& key) = 0;
  virtual void deleteKey(const std::string& key) = 0;
};

}  // namespace detail
}  // namespace attnscope
