// What sonde writes as text: JSON that never throws on text that is not UTF-8 (json_text), times
// to the microsecond however long the machine has been up (append_time), gzip through zlib's
// 32-bit counts in chunks (issue 22).
#include <zlib.h>

#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/gzip.hpp"
#include "core/json_text.hpp"
#include "sinks/format.hpp"
#include "sinks/run_csv.hpp"

namespace sonde {
namespace {

TEST(JsonText, InvalidUtf8InValuesAndKeysIsReplacedNeverThrown) {
  nlohmann::json j;
  j["command"] = {"sh", "-c", std::string("caf\xe9")};
  j[std::string("k\xff")] = std::string("\xc3");  // a key, and a truncated two-byte sequence
  std::string text;
  ASSERT_NO_THROW(text = json_text(j));
  const nlohmann::json back = nlohmann::json::parse(text);
  EXPECT_EQ(back["command"][2], "caf\xef\xbf\xbd");
  EXPECT_EQ(back["k\xef\xbf\xbd"], "\xef\xbf\xbd");
  // What nlohmann's own dump() does with it: the throw that json_text() exists to avoid.
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);
}

TEST(JsonText, IndentAndValidTextAsDump) {
  const nlohmann::json j = {{"a", 1}, {"b", "é"}};
  EXPECT_EQ(json_text(j), "{\"a\":1,\"b\":\"é\"}");
  EXPECT_EQ(json_text(j, 2), j.dump(2));
}

TEST(JsonText, OrderedKeysKeepTheirOrder) {
  nlohmann::ordered_json j;
  j["status"] = "ready";
  j["pid"] = 1;
  j["a"] = std::string("\xff");
  EXPECT_EQ(json_text(j), "{\"status\":\"ready\",\"pid\":1,\"a\":\"\xef\xbf\xbd\"}");
}

TEST(AppendTime, MicrosecondsAfterMonthsOfUptime) {
  std::string out;
  append_time(out, 10'000'000.000123, "");  // 116 days after boot
  EXPECT_EQ(out, "10000000.000123");
  out.clear();
  append_time(out, std::nan(""), "null");
  EXPECT_EQ(out, "null");
  out.clear();
  const double values[] = {1.5, std::nan("")};
  append_run_row(out, 12'345'678.5, 1'700'000'000.25, values);
  EXPECT_EQ(out, "12345678.500000,1700000000.250000,1.5,\n");
}

std::string gunzip(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string out;
  char buf[1 << 14];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  }
  EXPECT_EQ(rc, Z_STREAM_END);
  EXPECT_EQ(z.avail_in, 0u);  // one gzip member, nothing after it
  inflateEnd(&z);
  return out;
}

TEST(Gzip, ChunkedInputIsCompressedWhole) {
  std::string in;
  for (int i = 0; i < 200'000; ++i) in += std::to_string(i * 7919 % 100'003) + ",";
  for (std::size_t chunk :
       {std::size_t{1000}, std::size_t{65'536}, in.size(), std::size_t{1} << 30}) {
    const std::string z = gzip_in_chunks(in, 6, chunk);
    ASSERT_FALSE(z.empty()) << chunk;
    EXPECT_EQ(gunzip(z), in) << "chunk " << chunk;
  }
  const std::string small = in.substr(0, 5000);
  EXPECT_EQ(gunzip(gzip_in_chunks(small, 9, 1)), small);  // one byte at a time
  EXPECT_EQ(gunzip(gzip("", 9)), "");
  EXPECT_EQ(gunzip(gzip(in, 1)), in);
}

// `sonde serve` compresses a page once and appends each scrape's own lines (issue 21): the
// result is one gzip member (inflate ends with the trailer, nothing left over) that inflates to
// the page and then the tail, its CRC and length checked by zlib.
TEST(Gzip, PrefixThenTailIsOneMember) {
  std::string page;
  for (int i = 0; i < 20'000; ++i) page += "sonde_x{cpu=\"" + std::to_string(i) + "\"} 1\n";
  const GzipPrefix prefix = gzip_prefix(page, 6);
  ASSERT_FALSE(prefix.bytes.empty());
  EXPECT_LT(prefix.bytes.size(), page.size() / 4);  // compressed, not stored
  const std::string big_tail(200'000, 'q');         // more than one stored block
  for (const std::string& tail :
       {std::string(), std::string("sonde_scrapes_total 7\n"), big_tail}) {
    const std::string z = gzip_finish(prefix, tail);
    EXPECT_EQ(gunzip(z), page + tail) << tail.size();
    EXPECT_EQ(z.compare(0, prefix.bytes.size(), prefix.bytes), 0);  // the prefix, copied
  }
  EXPECT_EQ(gunzip(gzip_finish(gzip_prefix("", 6), "x\n")), "x\n");
  EXPECT_EQ(gzip_finish(GzipPrefix{}, "x"), "");
}

}  // namespace
}  // namespace sonde
