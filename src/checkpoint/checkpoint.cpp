// checkpoint.cpp: a checkpoint directory as one name -> tensor map over its safetensors shards.
//
// With model.safetensors.index.json, the shards are the files its weight_map names, and every
// name it lists must be in the shard it says. Without an index, every *.safetensors file in the
// directory is a shard (sorted by name). A tensor name in two shards is an error either way: a
// silent choice would load the wrong bytes.
// find_suffix runs on a list sorted by reversed name, so one lookup costs O(log n) even for the
// full model's ~500k tensors (load_moe_layer does thousands of lookups per layer).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "json_util.h"
#include "mxmoe/safetensors.h"

namespace mxmoe {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

bool ends_at_boundary(const std::string& name, const std::string& suffix) {
  if (name.size() < suffix.size()) return false;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  return name.size() == suffix.size() || name[name.size() - suffix.size() - 1] == '.';
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(dir + ": not a checkpoint directory");
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->dir_ = dir;

  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> shards;
  json weight_map;
  if (fs::exists(index_path, ec)) {
    std::ifstream in(index_path);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) throw Error(index_path.string() + ": cannot read");
    json idx = json::parse(ss.str(), nullptr, false);
    if (idx.is_discarded() || !idx.is_object())
      throw Error(index_path.string() + ": not a JSON object");
    auto wm = idx.find("weight_map");
    if (wm == idx.end() || !wm->is_object())
      throw Error(index_path.string() + ": missing or non-object weight_map");
    weight_map = *wm;
    std::set<std::string> seen;
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      if (!it.value().is_string())
        throw Error(index_path.string() + ": weight_map entry '" + detail::printable(it.key()) +
                    "' is not a string");
      const std::string f = it.value().get<std::string>();
      // Shard names are plain file names next to the index; anything else is refused rather
      // than followed out of the directory.
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        throw Error(index_path.string() + ": weight_map entry '" + detail::printable(it.key()) +
                    "' names a bad shard '" + detail::printable(f) + "'");
      if (seen.insert(f).second) shards.push_back(f);
    }
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors") shards.push_back(e.path().filename().string());
    }
    if (ec) throw Error(dir + ": cannot list: " + ec.message());
    std::sort(shards.begin(), shards.end());
    if (shards.empty()) throw Error(dir + ": no model.safetensors.index.json and no *.safetensors");
  }

  for (const std::string& s : shards)
    c->files_.push_back(SafetensorsFile::open((fs::path(dir) / s).string()));
  for (const auto& f : c->files_) {
    for (const TensorView& t : f->tensors()) {
      auto ins = c->by_name_.emplace(t.name, &t);
      if (!ins.second)
        throw Error(dir + ": tensor '" + detail::printable(t.name) +
                    "' is in two shards: " + ins.first->second->file + " and " + t.file);
    }
  }
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    auto t = c->by_name_.find(it.key());
    const std::string want = (fs::path(dir) / it.value().get<std::string>()).string();
    if (t == c->by_name_.end() || t->second->file != want)
      throw Error(index_path.string() + ": tensor '" + detail::printable(it.key()) +
                  "' is not in its shard " + detail::printable(it.value().get<std::string>()));
  }
  c->by_suffix_.reserve(c->by_name_.size());
  for (const auto& kv : c->by_name_)
    c->by_suffix_.emplace_back(std::string(kv.first.rbegin(), kv.first.rend()), kv.second);
  std::sort(c->by_suffix_.begin(), c->by_suffix_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return c;
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorView* Checkpoint::find_suffix(const std::string& suffix) const {
  const std::string rev(suffix.rbegin(), suffix.rend());
  auto it = std::lower_bound(by_suffix_.begin(), by_suffix_.end(), rev,
                             [](const auto& e, const std::string& k) { return e.first < k; });
  const TensorView* found = nullptr;
  for (; it != by_suffix_.end() && it->first.compare(0, rev.size(), rev) == 0; ++it) {
    if (!ends_at_boundary(it->second->name, suffix)) continue;
    if (found)
      throw Error(dir_ + ": tensor suffix '" + suffix + "' is ambiguous: '" +
                  detail::printable(found->name) + "' and '" + detail::printable(it->second->name) +
                  "'");
    found = it->second;
  }
  return found;
}

std::vector<const TensorView*> Checkpoint::all() const {
  std::vector<const TensorView*> v;
  v.reserve(by_name_.size());
  for (const auto& kv : by_name_) v.push_back(kv.second);
  return v;
}

}  // namespace mxmoe
