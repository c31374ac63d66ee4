// Request bodies parsed with the nesting limit: at the limit, over it, far over it (the
// 100,000-level body that used to crash the server), malformed and non-object bodies.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "server/json_body.h"

namespace pagoda::server {
namespace {

// {"tokens": [[...[1]...]], "x": 1} with `levels` containers in all (the object counts).
std::string nested_body(int levels) {
  const int arrays = levels - 1;
  return "{\"tokens\": " + std::string(static_cast<size_t>(arrays), '[') + "1" +
         std::string(static_cast<size_t>(arrays), ']') + ", \"x\": 1}";
}

TEST(JsonBody, DepthAtTheLimitParses) {
  auto r = parse_json_body(nested_body(kDefaultMaxJsonDepth));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value()["x"], 1);
  const nlohmann::ordered_json* inner = &r.value()["tokens"];
  int arrays = 0;
  while (inner->is_array()) {
    ++arrays;
    inner = &(*inner)[0];
  }
  EXPECT_EQ(arrays, kDefaultMaxJsonDepth - 1);
  EXPECT_EQ(*inner, 1);
  // Objects count as levels too.
  EXPECT_TRUE(parse_json_body(R"({"a": {"b": {"c": []}}})", 4).ok());
  EXPECT_FALSE(parse_json_body(R"({"a": {"b": {"c": []}}})", 3).ok());
}

TEST(JsonBody, OneLevelOverTheLimitIsRefused) {
  auto r = parse_json_body(nested_body(kDefaultMaxJsonDepth + 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status, 400);
  EXPECT_EQ(r.error().message, "the request body nests deeper than 64 levels");
  // Depth is nesting, not the number of containers: siblings do not add up.
  std::string wide = "{\"a\": [";
  for (int i = 0; i < 1000; ++i) wide += "[[]],";
  wide += "[]]}";
  EXPECT_TRUE(parse_json_body(wide, 4).ok());
}

TEST(JsonBody, HundredThousandLevelsFailQuickly) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = parse_json_body(nested_body(100000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("deeper than 64"), std::string::npos);
  // Unclosed, and as an array at the top: the depth is what stops the parse.
  auto open = parse_json_body(std::string(100000, '['));
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.error().message.find("deeper than 64"), std::string::npos);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0);  // the parse stops at level 65: microseconds, even under ASan
}

TEST(JsonBody, InvalidJsonAndNonObjects) {
  for (const char* bad : {"", "{not json", "{\"a\": 1", "{\"a\": 1} x", "{\"a\": 1e999}"}) {
    auto r = parse_json_body(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().status, 400);
    EXPECT_EQ(r.error().message.rfind("the request body is not valid JSON", 0), 0u)
        << r.error().message;
  }
  for (const char* not_object : {"[1, 2]", "\"text\"", "3", "null"}) {
    auto r = parse_json_body(not_object);
    ASSERT_FALSE(r.ok()) << not_object;
    EXPECT_EQ(r.error().message, "the request body must be a JSON object");
  }
}

TEST(JsonBody, KeepsKeyOrderAndValues) {
  auto r = parse_json_body(R"({"z": 1, "a": [true, null, -2, 18446744073709551615, 0.5],
                               "m": {"y": "s", "b": {}}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().dump(),
            R"({"z":1,"a":[true,null,-2,18446744073709551615,0.5],"m":{"y":"s","b":{}}})");
  EXPECT_TRUE(r.value()["a"][3].is_number_unsigned());
}

}  // namespace
}  // namespace pagoda::server
