// Tests of conveyor/s3/credentials.hpp: what `describe()` may say about a key pair.
#include "../support/common.hpp"

#include <conveyor/s3/credentials.hpp>

#include <string>

namespace s3 = conveyor::s3;

TEST_CASE("credentials describe shortens the key id, names the source and never shows the secret or the token")
{
    const s3::credentials c{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "SESSION-TOKEN", "environment"};
    CHECK_FALSE(c.anonymous());
    CHECK(c.describe() == "access key AKIA...MPLE from environment");
    CHECK(c.describe().find("wJalr") == std::string::npos);
    CHECK(c.describe().find("SESSION") == std::string::npos);

    // A key id of eight characters or fewer is shown as it is; no source, no "from".
    CHECK(s3::credentials{"AKIA1234", "secret", "", ""}.describe() == "access key AKIA1234");
}

TEST_CASE("anonymous credentials say so, with their source when there is one")
{
    s3::credentials none;
    CHECK(none.anonymous());
    CHECK(none.describe() == "anonymous access");
    none.source = "requested";
    CHECK(none.describe() == "anonymous access (requested)");
}
