#include "actors/token_store.hpp"

#include "client/secret_file.hpp"

namespace fusee::server {

proto::result<std::vector<proto::token>> read_tokens(const std::vector<token_settings>& settings) {
  std::vector<proto::token> out;
  for (size_t i = 0; i < settings.size(); ++i) {
    auto& t = settings[i];
    auto which = "[[token]] #" + std::to_string(i + 1) +
                 (t.name.empty() ? std::string{} : " (\"" + t.name + "\")") + ": ";
    auto bad = [&](std::string m) { return proto::error{proto::err_code::io, which + m}; };
    if (t.name.empty()) return bad("`token.name` is required (it names the token in logs)");
    for (size_t j = 0; j < i; ++j)
      if (settings[j].name == t.name) return bad("another [[token]] has the same name");
    auto sc = proto::parse_scope(t.scope);
    if (!sc) return bad("`token.scope` = \"" + t.scope + "\" is not one of worker, client, read");
    if (t.file.empty()) return bad("`token.file` is required");
    auto secret = client::read_secret_file(t.file, "token file");
    if (!secret) return bad(secret.err().message);
    out.push_back(proto::token{t.name, *sc, std::move(*secret)});
  }
  return out;
}

proto::result<std::shared_ptr<token_store>>
token_store::load(std::vector<token_settings> settings) {
  auto tokens = read_tokens(settings);
  if (!tokens) return tokens.err();
  auto store = std::make_shared<token_store>();
  store->settings_ = std::move(settings);
  store->tokens_.store(std::make_shared<const token_list>(std::move(*tokens)));
  return store;
}

proto::result<size_t> token_store::reload() {
  auto tokens = read_tokens(settings_);
  if (!tokens) return tokens.err();
  size_t n = tokens->size();
  tokens_.store(std::make_shared<const token_list>(std::move(*tokens)));
  reloads_.fetch_add(1, std::memory_order_relaxed);
  return n;
}

}  // namespace fusee::server
