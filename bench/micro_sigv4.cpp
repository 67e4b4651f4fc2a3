// micro_sigv4.cpp — what signing one S3 request costs (Google Benchmark; BENCHMARK_MAIN is
// in micro_stream.cpp).
//
// The target is at most 5 µs per signed request: a typical S3 GET (Host, Range,
// X-Amz-Date, X-Amz-Content-Sha256, maybe a session token). The signing key is cached per
// day, so these measure the steady state: canonical request, SHA-256, HMAC, headers set.
// Each iteration signs a fresh copy of the request's fields, as a client does per request;
// `fields_copy_only` is that copy alone, to subtract.

#include <conveyor/s3/sigv4.hpp>

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <string>

namespace {

namespace s3 = conveyor::s3;
namespace http = boost::beast::http;

s3::credentials bench_creds(bool with_token)
{
    return {.access_key_id = "AKIAIOSFODNN7EXAMPLE",
            .secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            .session_token = with_token ? std::string(
                                              "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQDexampleexampleexample"
                                              "exampleexampleexampleexampleexampleAiBexampleexampleexampleexampleexampleexample"
                                              "exampleexampleexampleexampleexampleexampleexampleexampleexampleexample+example==")
                                        : std::string(),
            .source = "bench"};
}

http::fields get_fields()
{
    http::fields f;
    f.set(http::field::host, "imagenet.s3.us-east-1.amazonaws.com");
    f.set(http::field::range, "bytes=1048576-2097151");
    f.set(http::field::user_agent, "conveyor/0.1");
    return f;
}

constexpr const char* get_target = "/train/shard-000123.tar";

void sign_get(benchmark::State& state, bool with_token)
{
    const s3::signer signer(bench_creds(with_token), "us-east-1");
    const auto base = get_fields();
    const auto now = std::chrono::system_clock::now();
    for (auto _ : state) {
        http::fields f = base;
        signer.sign(http::verb::get, get_target, f, s3::unsigned_payload, now);
        benchmark::DoNotOptimize(f);
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_sigv4_sign_get(benchmark::State& state) { sign_get(state, false); }
void BM_sigv4_sign_get_with_token(benchmark::State& state) { sign_get(state, true); }

// A list request: its query must be parsed, re-encoded and sorted.
void BM_sigv4_sign_list(benchmark::State& state)
{
    const s3::signer signer(bench_creds(false), "us-east-1");
    http::fields base;
    base.set(http::field::host, "imagenet.s3.us-east-1.amazonaws.com");
    const auto now = std::chrono::system_clock::now();
    for (auto _ : state) {
        http::fields f = base;
        signer.sign(http::verb::get, "/?prefix=train%2F&list-type=2&max-keys=1000&continuation-token=1ueGcxLPRx1Tr%2FXYExHnhbYLgveDs2J%2Fwm36Hy4vbOwM%3D",
                    f, s3::unsigned_payload, now);
        benchmark::DoNotOptimize(f);
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_sigv4_presign(benchmark::State& state)
{
    const s3::signer signer(bench_creds(false), "us-east-1");
    const auto now = std::chrono::system_clock::now();
    for (auto _ : state)
        benchmark::DoNotOptimize(signer.presign(http::verb::get, get_target, "imagenet.s3.us-east-1.amazonaws.com",
                                                std::chrono::hours(1), now));
    state.SetItemsProcessed(state.iterations());
}

// What a cache miss costs: the four-HMAC key derivation (once per day per signer).
void BM_sigv4_derive_signing_key(benchmark::State& state)
{
    for (auto _ : state) {
        s3::sigv4::signing_key key("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20240301", "us-east-1", "s3");
        benchmark::DoNotOptimize(key.bytes().data());
    }
}

// The copy of the request's fields each signing benchmark makes (not signing).
void BM_sigv4_fields_copy_only(benchmark::State& state)
{
    const auto base = get_fields();
    for (auto _ : state) {
        http::fields f = base;
        benchmark::DoNotOptimize(f);
    }
}

BENCHMARK(BM_sigv4_sign_get);
BENCHMARK(BM_sigv4_sign_get_with_token);
BENCHMARK(BM_sigv4_sign_get)->Threads(2);
BENCHMARK(BM_sigv4_sign_list);
BENCHMARK(BM_sigv4_presign);
BENCHMARK(BM_sigv4_derive_signing_key);
BENCHMARK(BM_sigv4_fields_copy_only);

} // namespace
