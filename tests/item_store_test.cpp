// The LangGraph store's items (src/store/item_store.hpp) on SQLite and on the PostgreSQL test
// cluster: put, get, replace, delete, search by prefix and value, namespaces, time to live, and
// the caps.
#include <gtest/gtest.h>

#include "parley/errors.hpp"
#include "run_databases.hpp"
#include "store/item_store.hpp"

namespace parley::testing {
namespace {

using detail::ItemStore;
using nlohmann::json;

template <class Db>
class ItemStoreTest : public ::testing::Test {
 protected:
  Db db;
  std::shared_ptr<ConversationStore> store = db.open();
  ItemStore items{*store};
};

using Databases = ::testing::Types<SqliteRunDb, PostgresRunDb>;
TYPED_TEST_SUITE(ItemStoreTest, Databases);

TYPED_TEST(ItemStoreTest, PutGetReplaceDelete) {
  auto& items = this->items;
  EXPECT_FALSE(items.get({"a", "b"}, "k", false));
  items.put({"a", "b"}, "k", {{"n", 1}}, std::nullopt);
  auto got = items.get({"a", "b"}, "k", false);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->value, (json{{"n", 1}}));
  EXPECT_EQ(got->ns, (std::vector<std::string>{"a", "b"}));
  items.put({"a", "b"}, "k", {{"n", 2}}, std::nullopt);
  EXPECT_EQ(items.get({"a", "b"}, "k", false)->value["n"], 2);
  EXPECT_TRUE(items.remove({"a", "b"}, "k"));
  EXPECT_FALSE(items.remove({"a", "b"}, "k"));
  EXPECT_FALSE(items.get({"a", "b"}, "k", false));
  // A second object on the same database finds the table made.
  ItemStore again(*this->store);
  again.put({"x"}, "k", json::object(), std::nullopt);
  EXPECT_TRUE(items.get({"x"}, "k", false));
}

TYPED_TEST(ItemStoreTest, SearchByPrefixAndValueAndListNamespaces) {
  auto& items = this->items;
  items.put({"docs", "ada"}, "1", {{"kind", "note"}}, std::nullopt);
  items.put({"docs", "ada"}, "2", {{"kind", "todo"}}, std::nullopt);
  items.put({"docs", "bob", "old"}, "3", {{"kind", "note"}}, std::nullopt);
  items.put({"docsx"}, "4", {{"kind", "note"}}, std::nullopt);  // not under docs
  auto all = items.search({"docs"}, nullptr, 10, 0, false);
  ASSERT_EQ(all.size(), 3u);
  auto notes = items.search({"docs"}, {{"kind", "note"}}, 10, 0, false);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[1].key, "3");
  EXPECT_EQ(items.search({"docs"}, nullptr, 1, 1, false).front().key, "2");
  EXPECT_EQ(items.search({}, nullptr, 10, 0, false).size(), 4u);
  using Ns = std::vector<std::vector<std::string>>;
  EXPECT_EQ(items.namespaces({"docs"}, {}, 0, 10, 0),
            (Ns{{"docs", "ada"}, {"docs", "bob", "old"}}));
  EXPECT_EQ(items.namespaces({}, {}, 1, 10, 0), (Ns{{"docs"}, {"docsx"}}));
  EXPECT_EQ(items.namespaces({}, {"old"}, 0, 10, 0), (Ns{{"docs", "bob", "old"}}));
}

TYPED_TEST(ItemStoreTest, AnExpiredItemIsGone) {
  auto& items = this->items;
  items.put({"t"}, "short", {{"v", 1}}, 0.0001);  // 6 ms
  items.put({"t"}, "long", {{"v", 2}}, 60.0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (items.get({"t"}, "short", false) && std::chrono::steady_clock::now() < until) {
  }
  EXPECT_FALSE(items.get({"t"}, "short", false));
  EXPECT_TRUE(items.get({"t"}, "long", true));
  EXPECT_EQ(items.search({"t"}, nullptr, 10, 0, false).size(), 1u);
}

TYPED_TEST(ItemStoreTest, InputsPastTheCapsAreRefused) {
  auto& items = this->items;
  EXPECT_THROW(items.put({"a"}, "k", {{"big", std::string(300'000, 'x')}}, std::nullopt),
               ValidationError);
  EXPECT_THROW(items.put(std::vector<std::string>(17, "n"), "k", json::object(), std::nullopt),
               ValidationError);
  EXPECT_THROW(items.put({"a.b"}, "k", json::object(), std::nullopt), ValidationError);
  EXPECT_THROW(items.put({std::string(129, 'l')}, "k", json::object(), std::nullopt),
               ValidationError);
  EXPECT_THROW(items.put({"a"}, std::string(257, 'k'), json::object(), std::nullopt),
               ValidationError);
  EXPECT_THROW(items.put({"a"}, "k", json::array(), std::nullopt), ValidationError);
  EXPECT_THROW(items.put({"a"}, "k", json::object(), 600'000.0), ValidationError);
  EXPECT_THROW(items.put({"a"}, "k", json::object(), -1.0), ValidationError);
  EXPECT_THROW(items.put({}, "k", json::object(), std::nullopt), ValidationError);
  EXPECT_TRUE(items.search({}, nullptr, 10, 0, false).empty());  // nothing stored
}

}  // namespace
}  // namespace parley::testing
