// The service's assistants (src/store/assistant_store.hpp) on SQLite and on the PostgreSQL test
// cluster: create (an id taken is refused), get, update as a new version with metadata merged,
// the version runs use moved back and forth, the versions listed, the oldest pruned past the
// cap (never the one runs use), delete.
#include <gtest/gtest.h>

#include "parley/errors.hpp"
#include "run_databases.hpp"
#include "store/assistant_store.hpp"

namespace parley::testing {
namespace {

using detail::AssistantChange;
using detail::AssistantStore;
using detail::AssistantVersion;
using nlohmann::json;

template <class Db>
class AssistantStoreTest : public ::testing::Test {
 protected:
  Db db;
  std::shared_ptr<ConversationStore> store = db.open();
  AssistantStore assistants{*store, 3};  // 3 versions kept

  static AssistantVersion first(const std::string& id) {
    AssistantVersion v;
    v.id = id;
    v.graphId = "agent";
    v.name = "First";
    v.config = {{"configurable", {{"system_prompt", "one"}}}};
    v.metadata = {{"team", "a"}};
    return v;
  }
};

using Databases = ::testing::Types<SqliteRunDb, PostgresRunDb>;
TYPED_TEST_SUITE(AssistantStoreTest, Databases);

TYPED_TEST(AssistantStoreTest, CreateGetUpdateSetLatestDelete) {
  auto& a = this->assistants;
  EXPECT_FALSE(a.get("a1"));
  ASSERT_TRUE(a.create(this->first("a1")));
  EXPECT_FALSE(a.create(this->first("a1")));  // taken: nothing written
  auto got = a.get("a1");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->current.version, 1);
  EXPECT_EQ(got->current.name, "First");
  EXPECT_FALSE(got->current.description);
  EXPECT_EQ(got->current.config["configurable"]["system_prompt"], "one");

  AssistantChange change;
  change.config = json{{"configurable", {{"system_prompt", "two"}}}};
  change.metadata = json{{"stage", "b"}};
  change.description = "second";
  auto updated = a.update("a1", change);
  ASSERT_TRUE(updated);
  EXPECT_EQ(updated->current.version, 2);
  EXPECT_EQ(updated->current.name, "First");  // kept
  EXPECT_EQ(updated->current.description, "second");
  EXPECT_EQ(updated->current.metadata, (json{{"team", "a"}, {"stage", "b"}}));
  EXPECT_FALSE(a.update("nope", change));

  auto back = a.setLatest("a1", 1);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->current.version, 1);
  EXPECT_EQ(a.get("a1")->current.config["configurable"]["system_prompt"], "one");
  EXPECT_FALSE(a.setLatest("a1", 9));
  EXPECT_EQ(a.get("a1")->current.version, 1);  // unchanged by the refused one
  ASSERT_TRUE(a.version("a1", 2));
  EXPECT_EQ(a.version("a1", 2)->config["configurable"]["system_prompt"], "two");

  // An update from version 1 (the current one) is version 3, made current.
  AssistantChange rename;
  rename.name = "Third";
  auto third = a.update("a1", rename);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->current.version, 3);
  EXPECT_EQ(third->current.config["configurable"]["system_prompt"], "one");

  ASSERT_TRUE(a.create(this->first("b2")));
  auto all = a.list(10);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].current.id, "a1");
  EXPECT_EQ(all[0].current.version, 3);
  EXPECT_EQ(a.list(1).size(), 1u);

  EXPECT_TRUE(a.remove("a1"));
  EXPECT_FALSE(a.remove("a1"));
  EXPECT_FALSE(a.get("a1"));
  EXPECT_TRUE(a.versions("a1").empty());
  EXPECT_TRUE(a.get("b2"));
}

TYPED_TEST(AssistantStoreTest, VersionsPastTheCapLoseTheOldestNotTheOneRunsUse) {
  auto& a = this->assistants;
  ASSERT_TRUE(a.create(this->first("a1")));
  AssistantChange change;
  for (int i = 0; i < 3; ++i) {
    change.name = "v" + std::to_string(i + 2);
    ASSERT_TRUE(a.update("a1", change));
  }
  // Versions 1..4 made, 3 kept: 4, 3, 2.
  auto kept = a.versions("a1");
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].version, 4);
  EXPECT_EQ(kept[2].version, 2);
  EXPECT_FALSE(a.version("a1", 1));
  EXPECT_FALSE(a.setLatest("a1", 1));
  // Runs use version 2, then an update: 5 is made current and 2 (the oldest) goes.
  ASSERT_TRUE(a.setLatest("a1", 2));
  change.name = "v5";
  ASSERT_TRUE(a.update("a1", change));
  kept = a.versions("a1");
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].version, 5);
  EXPECT_EQ(kept[0].name, "v5");
  EXPECT_EQ(kept[2].version, 3);
  EXPECT_EQ(a.get("a1")->current.version, 5);
}

}  // namespace
}  // namespace parley::testing
