// shard_ls: lists the samples of tar shards, one JSON line per sample: its key, its shard's
// URL, and for each field its name, size in bytes and SHA-256. Reads local and S3 shards
// (plain or gzip-compressed) with conveyor's shard reader, so what it prints is what a
// training pipeline would get.
//
//   shard_ls /data/shard-{000000..000009}.tar
//   shard_ls --endpoint http://127.0.0.1:9000 s3://bucket/train/        (every shard under a prefix)
//   shard_ls out/index.json                                              (the shards of a dataset index)
#include <conveyor/conveyor.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/shard/source.hpp>

#include <CLI/CLI.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <openssl/evp.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace cv = conveyor;

namespace {

std::string sha256_hex(std::span<const std::byte> bytes)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr);
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < n; ++i) {
        out += hex[md[i] >> 4];
        out += hex[md[i] & 15];
    }
    return out;
}

} // namespace

int main(int argc, char** argv)
{
    CLI::App app{"shard_ls: one JSON line per sample of tar shards (key, url, and each field's name, size and SHA-256)"};
    std::vector<std::string> specs;
    std::string endpoint, region, profile;
    bool skip_errors = false;
    app.add_option("shards", specs,
                   "shards: paths, brace patterns (shard-{000..009}.tar), s3:// URLs, an s3:// prefix ending in '/', or a dataset index (.json)")
        ->required();
    app.add_option("--endpoint", endpoint, "S3 endpoint URL (default: AWS_ENDPOINT_URL, the profile, or AWS)");
    app.add_option("--region", region, "S3 region (default: AWS_REGION, the profile, or us-east-1)");
    app.add_option("--profile", profile, "AWS profile for credentials");
    app.add_flag("--skip-errors", skip_errors, "skip the rest of a shard that cannot be read (reported at the end) instead of stopping");
    CLI11_PARSE(app, argc, argv);

    try {
        cv::runtime rt;
        std::optional<cv::s3::client> s3;
        if (cv::shard::names_s3(specs)) {
            cv::s3::config_options co;
            co.endpoint_url = endpoint;
            co.region = region;
            co.profile = profile;
            if (!endpoint.empty()) co.style = cv::s3::addressing::path;
            s3.emplace(rt, co);
        }
        cv::shard::list_options lo;
        if (s3) lo.s3 = &*s3;
        auto list = cv::shard::resolve(specs, lo);

        cv::shard::source_options o;
        o.share = cv::split{};     // this tool reads everything, whatever the environment says
        o.order.shuffle = false;          // in list order, one shard after the other
        o.shards_in_flight = 1;
        o.errors = skip_errors ? cv::on_error::skip : cv::on_error::fail;
        o.s3 = s3;
        auto run = cv::shard::shards(std::move(list), o).on(rt).run();
        std::uint64_t samples = 0, bytes = 0;
        for (auto& s : run) {
            boost::json::object line;
            line["key"] = s.key;
            line["url"] = s.origin; // webdataset's __url__
            boost::json::array fields;
            for (const auto& f : s.fields) {
                fields.push_back(boost::json::object{{"name", f.name}, {"size", f.data.size()}, {"sha256", sha256_hex(f.data.span())}});
                bytes += f.data.size();
            }
            line["fields"] = std::move(fields);
            std::cout << boost::json::serialize(line) << '\n';
            ++samples;
        }
        std::cout.flush();
        std::fprintf(stderr, "shard_ls: %llu samples, %llu bytes of fields, %llu shard(s) skipped\n", static_cast<unsigned long long>(samples),
                     static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(run.stats().skipped.load()));
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shard_ls: %s\n", e.what());
        return 1;
    }
}
