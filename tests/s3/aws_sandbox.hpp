// A clean AWS environment for tests of the credentials chain (tests/s3/config.cpp and
// providers.cpp): every AWS variable conveyor reads unset, the instance metadata service
// off, HOME and the shared files' variables in a fresh temporary directory (removed at the
// end), and every variable put back as it was.
#ifndef CONVEYOR_TESTS_S3_AWS_SANDBOX_HPP
#define CONVEYOR_TESTS_S3_AWS_SANDBOX_HPP

#include "../support/env_guard.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <stdlib.h> // setenv, unsetenv, mkdtemp

namespace s3test {

using conveyor_test::env_guard;

/// A fresh directory, removed with everything in it at the end.
class temp_dir {
public:
    temp_dir()
    {
        std::string tmpl = (std::filesystem::temp_directory_path() / "conveyor-s3-sandbox-XXXXXX").string();
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path_ = tmpl;
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    ~temp_dir()
    {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    const std::string& path() const noexcept { return path_; }
    /// Writes `text` to `name` below the directory; returns its path.
    std::string write(const std::string& name, const std::string& text) const
    {
        const auto p = path_ + "/" + name;
        std::filesystem::create_directories(std::filesystem::path(p).parent_path());
        std::ofstream out(p, std::ios::binary | std::ios::trunc);
        out << text;
        REQUIRE(out.good());
        return p;
    }

private:
    std::string path_;
};

/// The clean environment. The shared files are not written until a test asks for them.
struct aws_sandbox {
    temp_dir dir;
    env_guard env;
    std::string credentials_path = dir.path() + "/credentials";
    std::string config_path = dir.path() + "/config";

    aws_sandbox()
    {
        for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
                              "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_STS",
                              "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_STS_REGIONAL_ENDPOINTS",
                              "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                              "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                              "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
                              "AWS_METADATA_SERVICE_TIMEOUT", "AWS_METADATA_SERVICE_NUM_ATTEMPTS", "AWS_EC2_METADATA_V1_DISABLED"})
            env.unset(v);
        env.set("AWS_EC2_METADATA_DISABLED", "true"); // a test that wants the service sets its endpoint
        env.set("HOME", dir.path());
        env.set("AWS_SHARED_CREDENTIALS_FILE", credentials_path);
        env.set("AWS_CONFIG_FILE", config_path);
    }
    void credentials_file(const std::string& text) const { dir.write("credentials", text); }
    void config_file(const std::string& text) const { dir.write("config", text); }
    std::string json_file(const std::string& text, const std::string& name = "creds.json") const { return dir.write(name, text); }
    /// Any other file in the sandbox (a token, a script); its path.
    std::string write(const std::string& name, const std::string& text) const { return dir.write(name, text); }
};

} // namespace s3test

#endif
