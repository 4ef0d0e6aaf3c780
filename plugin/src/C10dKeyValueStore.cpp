#include "C10dKeyValueStore.h"

#include <cstdint>
#include <vector>

namespace attnscope {
namespace detail {

void C10dKeyValueStore::set(const std::string& key, const std::string& value) {
  store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string C10dKeyValueStore::get(const std::string& key) {
  const std::vector<uint8_t> bytes = store_->get(key);
  return std::string(bytes.begin(), bytes.end());
}

int64_t C10dKeyValueStore::add(const std::string& key, int64_t delta) {
  return store_->add(key, delta);
}

bool C10dKeyValueStore::check(const std::string& key) { return store_->check({key}); }

void C10dKeyValueStore::deleteKey(const std::string& key) { store_->deleteKey(key); }

}  // namespace detail
}  // namespace attnscope
