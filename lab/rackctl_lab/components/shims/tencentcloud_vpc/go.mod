module github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc

go 1.26.0
