#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <stdlib.h> // setenv

int main(int argc, char** argv)
{
    // Tests talk to loopback only: the EC2 instance metadata service, the credentials
    // chain's last step, is off unless the environment (or a test) says otherwise.
    ::setenv("AWS_EC2_METADATA_DISABLED", "true", 0);
    doctest::Context context(argc, argv);
    return context.run();
}
